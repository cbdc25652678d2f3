//! The commit protocol of tables on object storage (ADR 0022), end to end on `object_store`'s
//! local filesystem (`file://`): staging, uploads, the log, re-applying a change onto a newer
//! version, refusing overlapping changes, and collection. Commands are played by writing a
//! staged manifest and its files by hand, as the engine would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use strata_format::{Manifest, PartEntry, TableSettings, manifest_log};
use strata_remote::{RemoteDataDir, RemoteError, RemoteOptions, Staging, TableChange};

fn settings(keyed: bool) -> TableSettings {
    TableSettings {
        key: keyed.then(|| strata_format::KeySetting {
            path: "k".into(),
            key_type: strata_json::KeyType::String,
        }),
        ..TableSettings::sorted_by(vec!["k".into()], 64)
    }
}

/// A part of a few bytes without checksums (copied whole, never as a footer copy).
fn part(file: &str) -> Arc<PartEntry> {
    Arc::new(
        serde_json::from_value(serde_json::json!({
            "file": file, "rows": 1, "bytes": file.len(), "columns": {}, "remainder_paths": {},
            "remainder_paths_truncated": false, "sort_key_min": {}, "sort_key_max": {}
        }))
        .unwrap(),
    )
}

fn open(dir: &Path) -> RemoteDataDir {
    let url = format!("file://{}", dir.join("objects").display());
    let options = RemoteOptions {
        cache_dir: Some(dir.join("cache")),
        ..RemoteOptions::default()
    };
    RemoteDataDir::open(&url, &options).unwrap()
}

/// Plays a command on the staged table `table`: `change` edits its manifest; parts it adds get
/// their files.
fn command(staging: &Staging, table: &str, keyed: bool, change: impl FnOnce(&mut Manifest)) {
    let dir = staging.root().join(table);
    std::fs::create_dir_all(dir.join("parts")).unwrap();
    // Parsed, not loaded: these stand-in parts have no key files for `validate` to find.
    let path = dir.join(strata_format::manifest::MANIFEST_FILE);
    let mut manifest = match std::fs::read(&path) {
        Ok(bytes) => Manifest::parse(&path, &bytes).unwrap(),
        Err(_) => Manifest::new(settings(keyed)),
    };
    let before: Vec<String> = manifest.parts.iter().map(|p| p.file.clone()).collect();
    change(&mut manifest);
    for part in &manifest.parts {
        if !before.contains(&part.file) {
            std::fs::write(dir.join("parts").join(&part.file), part.file.as_bytes()).unwrap();
        }
    }
    manifest.version += 1;
    manifest.commit(&dir).unwrap();
}

fn files(manifest: &Manifest) -> Vec<&str> {
    manifest.parts.iter().map(|p| p.file.as_str()).collect()
}

async fn newest(remote: &RemoteDataDir, table: &str) -> Manifest {
    manifest_log::latest(remote.store().as_ref(), table)
        .await
        .unwrap()
        .unwrap()
}

fn parts_on_store(dir: &Path, table: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir.join("objects").join(table).join("parts")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn concurrent_appends_both_commit_and_overlapping_changes_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let remote = open(tmp.path());
    let t = ("t".to_owned(), None);

    let create = remote.stage(std::slice::from_ref(&t)).await.unwrap();
    command(&create, "t", false, |m| m.parts.push(part("a")));
    let pushed = create.push(&remote).await.unwrap();
    assert!(matches!(
        pushed[0].change,
        TableChange::Committed {
            version: 1,
            files: 1,
            ..
        }
    ));

    // Two commands staged at version 1, each appending a part: both commit, in two versions.
    let first = remote.stage(std::slice::from_ref(&t)).await.unwrap();
    let second = remote.stage(std::slice::from_ref(&t)).await.unwrap();
    command(&first, "t", false, |m| m.parts.push(part("b")));
    command(&second, "t", false, |m| m.parts.push(part("c")));
    first.push(&remote).await.unwrap();
    second.push(&remote).await.unwrap();
    let state = newest(&remote, "t").await;
    assert_eq!((state.version, files(&state)), (3, vec!["a", "b", "c"]));

    // A merge of a and b, and a command that replaces a meanwhile: the later one is refused and
    // leaves no version; its upload is an orphan.
    let merge = remote.stage(std::slice::from_ref(&t)).await.unwrap();
    let rewrite = remote.stage(std::slice::from_ref(&t)).await.unwrap();
    command(&rewrite, "t", false, |m| {
        m.parts.retain(|p| p.file != "a");
        m.parts.push(part("a2"));
    });
    command(&merge, "t", false, |m| {
        m.parts.retain(|p| p.file != "a" && p.file != "b");
        m.parts.push(part("ab"));
    });
    rewrite.push(&remote).await.unwrap();
    let err = merge.push(&remote).await.unwrap_err();
    assert!(matches!(err, RemoteError::Conflict { .. }), "{err}");
    assert!(err.to_string().contains("no longer has part a"), "{err}");
    let state = newest(&remote, "t").await;
    assert_eq!((state.version, files(&state)), (4, vec!["b", "c", "a2"]));
    assert!(parts_on_store(tmp.path(), "t").contains(&"ab".to_owned()));

    // Collection with no grace: the replaced part and the orphan go, listed parts stay, and only
    // the newest version is left.
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
        + 1;
    // A server's collections remember what each version lists: the second reads no manifest.
    let mut remembered = strata_remote::gc::VersionFiles::default();
    let young = strata_remote::gc::collect_remembering(
        remote.store().as_ref(),
        "t",
        strata_remote::gc::GRACE_SECONDS,
        now,
        &mut remembered,
    )
    .await
    .unwrap();
    assert_eq!((young.files, young.versions), (0, 0));
    let (gets_before, _) = remote.stats().snapshot();
    let collected = strata_remote::gc::collect_remembering(
        remote.store().as_ref(),
        "t",
        0,
        now,
        &mut remembered,
    )
    .await
    .unwrap();
    let (gets_after, _) = remote.stats().snapshot();
    assert!(
        gets_after - gets_before <= 1,
        "only the version hint is read"
    );
    assert_eq!(collected.files, 2);
    assert_eq!(collected.versions, 3);
    assert_eq!(parts_on_store(tmp.path(), "t"), vec!["a2", "b", "c"]);
    assert_eq!(newest(&remote, "t").await.version, 4);
    // With the default grace nothing young goes.
    let again = strata_remote::gc::collect(
        remote.store().as_ref(),
        "t",
        strata_remote::gc::GRACE_SECONDS,
        now,
    )
    .await
    .unwrap();
    assert_eq!((again.files, again.versions), (0, 0));
}

#[tokio::test]
async fn a_keyed_table_takes_one_writer_at_a_time_and_drop_removes_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let remote = open(tmp.path());
    let t = ("k".to_owned(), None);
    let create = remote.stage(std::slice::from_ref(&t)).await.unwrap();
    command(&create, "k", true, |m| m.parts.push(part("a")));
    create.push(&remote).await.unwrap();
    let first = remote.stage(std::slice::from_ref(&t)).await.unwrap();
    let second = remote.stage(std::slice::from_ref(&t)).await.unwrap();
    command(&first, "k", true, |m| m.parts.push(part("b")));
    command(&second, "k", true, |m| m.parts.push(part("c")));
    first.push(&remote).await.unwrap();
    let err = second.push(&remote).await.unwrap_err();
    assert!(err.to_string().contains("one writer at a time"), "{err}");
    assert_eq!(files(&newest(&remote, "k").await), vec!["a", "b"]);
    // Staged again, the command commits (its part under a new name, as every part's is: the
    // refused command's upload is never overwritten).
    let retry = remote.stage(std::slice::from_ref(&t)).await.unwrap();
    command(&retry, "k", true, |m| m.parts.push(part("c")));
    assert!(
        retry.push(&remote).await.is_err(),
        "an existing object was replaced"
    );
    let retry = remote.stage(std::slice::from_ref(&t)).await.unwrap();
    command(&retry, "k", true, |m| m.parts.push(part("c2")));
    retry.push(&remote).await.unwrap();
    assert_eq!(files(&newest(&remote, "k").await), vec!["a", "b", "c2"]);

    assert_eq!(remote.tables().await.unwrap(), vec![("k".to_owned(), 3)]);
    let late = remote.stage(std::slice::from_ref(&t)).await.unwrap();
    command(&late, "k", true, |m| m.parts.push(part("d")));
    assert!(remote.drop_table("k").await.unwrap());
    assert!(remote.tables().await.unwrap().is_empty());
    assert!(parts_on_store(tmp.path(), "k").is_empty());
    // A command staged before the drop cannot bring the table back.
    let err = late.push(&remote).await.unwrap_err();
    assert!(err.to_string().contains("dropped the table"), "{err}");
    assert!(remote.tables().await.unwrap().is_empty());
}
