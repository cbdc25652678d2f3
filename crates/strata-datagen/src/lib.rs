//! placeholder while the workspace is set up
