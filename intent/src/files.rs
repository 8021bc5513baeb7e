//! The intent's files: a zone directory read into memory, and written back out.
use std::{
    collections::BTreeMap,
    fs,
    path::{Component, Path},
};

use crate::IntentError;

/// Files by path relative to the directory (`/`-separated), and their content.
pub type Files = BTreeMap<String, Vec<u8>>;

/// The geolocation database's place among a revision's files: `policy = "geo"` sets are
/// compiled from it at every location (`qdnsctl publish DIR --geoip-db FILE` puts FILE
/// there; a zone directory holding a file by this name publishes it as the database).
/// `*.toml` zones are what the zone loader reads, so the name never shadows a zone.
pub const GEO_DB: &str = "geoip.mmdb";

/// The geolocation database of the revision staged in `dir`, if it has one ([`GEO_DB`]).
#[must_use]
pub fn geo_db(dir: &Path) -> Option<std::path::PathBuf> {
    Some(dir.join(GEO_DB)).filter(|path| path.is_file())
}

/// Largest file taken (a country geo database and a million-record zone fit).
pub const MAX_FILE: u64 = 1 << 30;

/// Every regular file under `dir` (hidden ones and `*.tmp` left out), by relative path.
///
/// # Errors
/// A file or directory that cannot be read, a file over [`MAX_FILE`], a path that is not
/// UTF-8.
pub fn read_dir(dir: &Path) -> Result<Files, IntentError> {
    let mut files = Files::new();
    read_into(dir, dir, &mut files)?;
    Ok(files)
}

fn read_into(root: &Path, dir: &Path, files: &mut Files) -> Result<(), IntentError> {
    let entries = fs::read_dir(dir).map_err(|e| IntentError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| IntentError::io(dir, e))?;
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name.ends_with(".tmp") {
            continue;
        }
        let meta = fs::metadata(&path).map_err(|e| IntentError::io(&path, e))?;
        if meta.is_dir() {
            read_into(root, &path, files)?;
        } else if meta.is_file() {
            if meta.len() > MAX_FILE {
                return Err(IntentError::Files(format!(
                    "{}: {} octets, over the {MAX_FILE} a file of the intent may hold",
                    path.display(),
                    meta.len()
                )));
            }
            let relative = path
                .strip_prefix(root)
                .ok()
                .and_then(Path::to_str)
                .ok_or_else(|| IntentError::Files(format!("{}: not a UTF-8 path", path.display())))?;
            let content = fs::read(&path).map_err(|e| IntentError::io(&path, e))?;
            files.insert(relative.replace('\\', "/"), content);
        }
    }
    Ok(())
}

/// True when `path` (from the store) names a file inside the directory: relative,
/// no `..`, no empty or hidden part.
#[must_use]
pub fn is_safe(path: &str) -> bool {
    !path.is_empty()
        && path.split('/').all(|part| !part.is_empty() && !part.starts_with('.'))
        && Path::new(path).components().all(|c| matches!(c, Component::Normal(_)))
}

/// Writes `files` as directory `dir` (which must not exist yet): into `dir.tmp`, each
/// file synced, then renamed into place, so `dir` is whole or absent.
///
/// # Errors
/// A path that is not [`is_safe`], or a write that fails.
pub fn write_dir(files: &Files, dir: &Path) -> Result<(), IntentError> {
    let tmp = dir.with_extension("tmp");
    let _ = fs::remove_dir_all(&tmp);
    let written = (|| {
        for (path, content) in files {
            if !is_safe(path) {
                return Err(IntentError::Files(format!(
                    "{path:?}: not a path inside the zone directory"
                )));
            }
            let target = tmp.join(path);
            if let Some(parent) = target.parent() {
                fs::create_dir_all(parent).map_err(|e| IntentError::io(parent, e))?;
            }
            qdns_link::protocol::write_private(&target, content).map_err(|e| IntentError::io(&target, e))?;
        }
        fs::create_dir_all(&tmp).map_err(|e| IntentError::io(&tmp, e))?;
        fs::rename(&tmp, dir).map_err(|e| IntentError::io(dir, e))
    })();
    if written.is_err() {
        let _ = fs::remove_dir_all(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_reads_and_writes_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("sub")).unwrap();
        fs::write(dir.path().join("a.toml"), b"a").unwrap();
        fs::write(dir.path().join("sub/b.zone"), b"b").unwrap();
        fs::write(dir.path().join(".hidden"), b"h").unwrap();
        fs::write(dir.path().join("x.tmp"), b"t").unwrap();
        let files = read_dir(dir.path()).unwrap();
        assert_eq!(files.keys().collect::<Vec<_>>(), ["a.toml", "sub/b.zone"]);
        let out = dir.path().join("out");
        write_dir(&files, &out).unwrap();
        assert_eq!(read_dir(&out).unwrap(), files);
        // Paths from the store that would leave the directory are refused.
        for bad in ["../x", "/etc/x", "a/../../x", "", ".git/config", "a//b"] {
            assert!(!is_safe(bad), "{bad}");
            let evil = Files::from([(bad.to_owned(), b"x".to_vec())]);
            assert!(write_dir(&evil, &dir.path().join("evil")).is_err(), "{bad}");
            assert!(!dir.path().join("evil").exists());
        }
    }
}
