//! Reading a host's config and replacing it safely: a timestamped backup beside it, then a temp
//! file in the same folder renamed over it. It must never write a file that changed since it was
//! read, and never leave a half-written config behind.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// A config as adopt read it: its real path (links followed), text and modification time.
pub struct Snapshot {
    pub path: PathBuf,
    pub text: String,
    modified: Option<SystemTime>,
}

/// Read `path` (following links, so a linked dotfile is edited where it lives).
pub fn read(path: &Path) -> Result<Snapshot, String> {
    let real = fs::canonicalize(path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let modified = fs::metadata(&real).and_then(|m| m.modified()).ok();
    let text = fs::read_to_string(&real)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    Ok(Snapshot {
        path: real,
        text,
        modified,
    })
}

/// Refuse when the file's modification time or contents differ from the snapshot.
fn unchanged(snapshot: &Snapshot) -> Result<(), String> {
    let path = &snapshot.path;
    let modified = fs::metadata(path).and_then(|m| m.modified()).ok();
    let text = fs::read_to_string(path).ok();
    if modified != snapshot.modified || text.as_deref() != Some(snapshot.text.as_str()) {
        return Err(format!(
            "{} changed since adopt read it (is the host writing it?); nothing was written: \
             run adopt again",
            path.display()
        ));
    }
    Ok(())
}

/// Save a backup of the snapshot beside the file, then replace the file with `text` atomically.
/// Returns the backup's path.
pub fn replace(snapshot: &Snapshot, text: &str) -> Result<PathBuf, String> {
    unchanged(snapshot)?;
    let path = &snapshot.path;
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("config");
    let stamp = utc_stamp(SystemTime::now());
    let (backup, mut file) = create_new_numbered(dir, &format!("{name}.{stamp}.bak"))?;
    let fail = |what: &str, error: std::io::Error, file: &Path| {
        format!("cannot {what} {}: {error}", file.display())
    };
    file.write_all(snapshot.text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|error| fail("write the backup", error, &backup))?;
    let (temp, mut file) =
        create_new_numbered(dir, &format!(".{name}.adopt-{}.tmp", std::process::id()))?;
    let written = file
        .write_all(text.as_bytes())
        .and_then(|()| {
            if let Ok(meta) = fs::metadata(path) {
                file.set_permissions(meta.permissions())?;
            }
            file.sync_all()
        })
        .map_err(|error| fail("write", error, &temp))
        .and_then(|()| unchanged(snapshot))
        .and_then(|()| fs::rename(&temp, path).map_err(|error| fail("replace", error, path)));
    if let Err(error) = written {
        let _ = fs::remove_file(&temp);
        let _ = fs::remove_file(&backup);
        return Err(error);
    }
    Ok(backup)
}

/// Create `dir/name`, or `dir/name.2`, `.3` … when taken, never overwriting a file.
fn create_new_numbered(dir: &Path, name: &str) -> Result<(PathBuf, File), String> {
    for n in 1..100 {
        let candidate = if n == 1 {
            dir.join(name)
        } else {
            dir.join(format!("{name}.{n}"))
        };
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&candidate)
        {
            Ok(file) => return Ok((candidate, file)),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(error) => {
                return Err(format!("cannot create {}: {error}", candidate.display()));
            }
        }
    }
    Err(format!(
        "cannot create {} in {}: 99 files of that name exist; remove old ones",
        name,
        dir.display()
    ))
}

/// `YYYYMMDD-HHMMSS` in UTC.
fn utc_stamp(time: SystemTime) -> String {
    let secs = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's days-to-civil.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}-{:02}{:02}{:02}",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("adopt-write-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn stamps_are_utc_calendar_time() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_709_210_096);
        assert_eq!(utc_stamp(t), "20240229-123456");
    }

    #[test]
    fn a_file_changed_since_it_was_read_is_not_written() {
        let dir = temp_dir("changed");
        let path = dir.join("mcp.json");
        fs::write(&path, "{}\n").unwrap();
        let snapshot = read(&path).unwrap();
        fs::write(&path, "{\"edited\": true}\n").unwrap();
        let error = replace(&snapshot, "{\"adopted\": true}\n").unwrap_err();
        assert!(error.contains("changed since adopt read it"), "{error}");
        assert_eq!(fs::read_to_string(&path).unwrap(), "{\"edited\": true}\n");
        let left: Vec<_> = fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 1, "no backup or temp file is left behind");
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn a_file_touched_with_the_same_contents_is_not_written() {
        let dir = temp_dir("touched");
        let path = dir.join("mcp.json");
        fs::write(&path, "{}\n").unwrap();
        let snapshot = read(&path).unwrap();
        let later = SystemTime::now() + std::time::Duration::from_secs(5);
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(later)
            .unwrap();
        assert!(replace(&snapshot, "[]\n").is_err());
        assert_eq!(fs::read_to_string(&path).unwrap(), "{}\n");
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn replacing_keeps_a_backup_of_what_was_read() {
        let dir = temp_dir("backup");
        let path = dir.join("mcp.json");
        fs::write(&path, "{}\n").unwrap();
        let snapshot = read(&path).unwrap();
        let backup = replace(&snapshot, "[]\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "[]\n");
        assert_eq!(fs::read_to_string(&backup).unwrap(), "{}\n");
        let second = replace(&read(&path).unwrap(), "[1]\n").unwrap();
        assert_ne!(backup, second, "a second backup never overwrites the first");
        let _ = fs::remove_dir_all(dir);
    }
}
