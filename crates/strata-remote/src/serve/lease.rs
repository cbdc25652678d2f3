//! One server per data directory: the lease `.wal/lease`.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use object_store::path::Path as StorePath;
use object_store::{ObjectStoreExt as _, PutMode};
use strata_engine::wal::WAL_DIR;

use super::{ServeMirror, get, put, unix_now};
use crate::error::RemoteError;
use crate::location::delete_if_exists;

/// A lease not renewed for this long belongs to a server that is gone.
pub const LEASE_SECONDS: i64 = 30;
pub const LEASE_RENEW_SECONDS: u64 = 10;
const LEASE_FILE: &str = "lease";

impl ServeMirror {
    pub(super) fn check_lease(&self) -> Result<(), RemoteError> {
        if self.fenced.load(Ordering::SeqCst) {
            return Err(RemoteError::Location {
                url: self.remote.url().to_owned(),
                message: "another strata serve took over this data directory's lease; this \
                          server no longer writes to it"
                    .into(),
            });
        }
        Ok(())
    }

    pub(super) async fn take_lease(&self) -> Result<(), RemoteError> {
        let store = self.remote.store().as_ref();
        let location = lease_location();
        match store.get(&location).await {
            Ok(found) => {
                let bytes = found
                    .bytes()
                    .await
                    .map_err(|e| RemoteError::store(&location, e))?;
                let held: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
                let renewed = held["renewed"].as_i64().unwrap_or(0);
                let age = unix_now() - renewed;
                if age < lease_seconds() {
                    return Err(RemoteError::Location {
                        url: self.remote.url().to_owned(),
                        message: format!(
                            "another strata serve runs on it (host {}, process {}, lease \
                             renewed {age} s ago); one server per data directory (a lease not \
                             renewed for {} s is taken over)",
                            held["host"].as_str().unwrap_or("?"),
                            held["pid"],
                            lease_seconds()
                        ),
                    });
                }
            }
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(RemoteError::store(&location, e)),
        }
        self.write_lease().await
    }

    async fn write_lease(&self) -> Result<(), RemoteError> {
        let mut lease = self.lease.clone();
        lease["renewed"] = unix_now().into();
        put(
            self.remote.store().as_ref(),
            &lease_location(),
            Bytes::from(lease.to_string()),
            PutMode::Overwrite,
        )
        .await
    }

    /// Renews the lease, or stops writing when another server holds it now.
    pub(super) fn renew_lease(&self) -> Result<(), RemoteError> {
        self.check_lease()?;
        let location = lease_location();
        let held = self.block_on(get(self.remote.store().as_ref(), &location))?;
        let held: serde_json::Value = serde_json::from_slice(&held).unwrap_or_default();
        if held["started"] != self.lease["started"] || held["pid"] != self.lease["pid"] {
            self.fenced.store(true, Ordering::SeqCst);
            return self.check_lease();
        }
        self.block_on(self.write_lease())
    }

    pub(super) fn release_lease(&self) -> Result<(), RemoteError> {
        if self.fenced.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.block_on(delete_if_exists(
            self.remote.store().as_ref(),
            &lease_location(),
        ))
    }
}

fn lease_location() -> StorePath {
    StorePath::from_iter([WAL_DIR, LEASE_FILE])
}

pub(super) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// `STRATA_LEASE_SECONDS` (tests), or [`LEASE_SECONDS`].
fn lease_seconds() -> i64 {
    std::env::var("STRATA_LEASE_SECONDS")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(LEASE_SECONDS)
}
