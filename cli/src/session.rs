//! Owns the `--session FILE`: where it really lives (a symlink is followed to its
//! target), the lock that keeps two panto processes from interleaving turns on it, and
//! the atomic, private save.
//!
//! A save writes a new file next to the target and renames it over the target, so a
//! reader (or a crash) sees the old conversation or the new one, never half of one. The
//! new file gets a random name, is created exclusively and never through a symlink
//! (`O_EXCL | O_NOFOLLOW`): a link planted under a predictable name could otherwise make
//! panto overwrite and chmod a file of the planter's choosing. It is readable by the
//! owner only, unless the old session file had other permissions, which it keeps.
//!
//! The lock is `flock` on `FILE.lock` (next to the target), held from before the load
//! until the process exits; not on the session file itself, which every save replaces.
//! The lock file is left in place: removing it would race with the next process.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use panto::{Agent, Error};

/// Most symlinks followed from the session path to its target (Linux's own limit).
const MAX_LINKS: usize = 40;

/// The temporary file of the save in progress, if any: what a forced exit removes.
static PENDING: Mutex<Option<PathBuf>> = Mutex::new(None);

/// The `--session` file, locked for this process.
pub struct Session {
    /// As given, for messages.
    shown: PathBuf,
    /// The file the conversation is read from and saved to: `shown`, symlinks resolved.
    path: PathBuf,
    /// Holds the lock until the process exits.
    _lock: File,
}

impl Session {
    /// Resolves `path` and takes its lock; fails if another process holds it.
    pub fn open(path: &Path) -> Result<Session, Error> {
        let error = |what: &str, why: &str| session_error(path, what, why);
        let target = resolve(path).map_err(|e| error("cannot follow the link", &e.to_string()))?;
        let lock_path =
            sibling(&target, ".lock").ok_or_else(|| error("cannot open", "not a file name"))?;
        let lock = open_lock(&lock_path).map_err(|e| {
            error(
                &format!("cannot open {}", lock_path.display()),
                &e.to_string(),
            )
        })?;
        match try_lock(&lock) {
            Ok(true) => {}
            Ok(false) => {
                return Err(error(
                    "in use by another panto process",
                    &format!(
                        "it holds the lock {}; wait for it to finish or use another session file",
                        lock_path.display()
                    ),
                ))
            }
            Err(e) => {
                return Err(error(
                    &format!("cannot lock {}", lock_path.display()),
                    &e.to_string(),
                ))
            }
        }
        Ok(Session {
            shown: path.to_owned(),
            path: target,
            _lock: lock,
        })
    }

    /// The file the conversation is saved to (links followed).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Loads the saved conversation; a missing or empty file is a new conversation. At
    /// most the agent's `max_history_bytes` are read (what loading it would allow), and
    /// only from a regular file.
    pub fn load(&self, agent: &Agent) -> Result<(), Error> {
        if let Err(e) = fs::metadata(&self.path) {
            if e.kind() == io::ErrorKind::NotFound {
                return Ok(());
            }
        }
        let bytes = panto::media::read_file(
            &self.path,
            agent.config().max_history_bytes,
            "--session",
            "max_history_bytes",
        )?;
        let text =
            String::from_utf8(bytes).map_err(|e| self.error("cannot read", &e.to_string()))?;
        if text.trim().is_empty() {
            return Ok(());
        }
        agent
            .load_history_json(&text)
            .map_err(|e| self.error("cannot load", &e.message))
    }

    /// Saves the conversation (atomically, privately: see the module documentation).
    pub fn save(&self, agent: &Agent) -> Result<(), Error> {
        let json = agent.history_json();
        let (tmp, file) = create_temp(&self.path).map_err(|e| self.error("cannot save", &e))?;
        let written = write_temp(file, json.as_bytes(), Some(&self.path)).and_then(|()| {
            test_hooks::pause_before_rename();
            let mut pending = lock_pending();
            fs::rename(&tmp, &self.path)?;
            *pending = None;
            Ok(())
        });
        if let Err(e) = written {
            // Leave nothing behind; the old session (if any) is untouched.
            let mut pending = lock_pending();
            let _ = fs::remove_file(&tmp);
            *pending = None;
            return Err(self.error("cannot save", &e.to_string()));
        }
        // The rename is durable once the directory is; a failure here loses nothing
        // that a crash right before the rename would not have.
        if let Ok(dir) = File::open(parent(&self.path)) {
            let _ = dir.sync_all();
        }
        Ok(())
    }

    fn error(&self, what: &str, why: &str) -> Error {
        session_error(&self.shown, what, why)
    }
}

/// Replaces the file at `target` with `bytes` as a save does (a new owner-only file,
/// created exclusively and never through a link, renamed over the target: a reader or
/// a crash sees the old content or the new), but always with mode 0600, whatever the
/// old file had: for `--checkpoint FILE`, whose content is the conversation.
pub fn replace_privately(target: &Path, bytes: &[u8]) -> Result<(), String> {
    let (tmp, file) = create_temp(target)?;
    let written = write_temp(file, bytes, None).and_then(|()| {
        let mut pending = lock_pending();
        fs::rename(&tmp, target)?;
        *pending = None;
        Ok(())
    });
    if let Err(e) = written {
        let mut pending = lock_pending();
        let _ = fs::remove_file(&tmp);
        *pending = None;
        return Err(e.to_string());
    }
    if let Ok(dir) = File::open(parent(target)) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// For a forced exit: removes the temporary file of a save in progress, and keeps a new
/// one from being created until the process is gone.
pub fn abandon_save_for_exit() {
    let mut pending = lock_pending();
    if let Some(tmp) = pending.take() {
        let _ = fs::remove_file(tmp);
    }
    // Held until the process exits: creating a temporary file takes this lock.
    std::mem::forget(pending);
}

fn lock_pending() -> std::sync::MutexGuard<'static, Option<PathBuf>> {
    // Only ever assigned whole; a poisoned value is still accurate.
    PENDING.lock().unwrap_or_else(PoisonError::into_inner)
}

fn session_error(path: &Path, what: &str, why: &str) -> Error {
    Error::config(format!("--session {}: {what}: {why}", path.display()))
}

/// `path` with every symlink in its last component followed, however many; a path that
/// does not exist (yet) is where the conversation will be created.
fn resolve(path: &Path) -> io::Result<PathBuf> {
    let mut path = path.to_owned();
    for _ in 0..MAX_LINKS {
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = fs::read_link(&path)?;
                // Relative to the link's directory; `join` keeps an absolute target as is.
                path = parent(&path).join(target);
            }
            Ok(_) => return Ok(path),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(path),
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other(format!(
        "more than {MAX_LINKS} symbolic links in a row"
    )))
}

/// The directory of `path` ("." for a bare file name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// `path` with `suffix` appended to its file name.
fn sibling(path: &Path, suffix: &str) -> Option<PathBuf> {
    let mut name = path.file_name()?.to_owned();
    name.push(suffix);
    Some(path.with_file_name(name))
}

fn open_lock(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true);
    private_no_follow(&mut options);
    options.open(path)
}

/// Owner-only permissions for a new file, and never through a symlink.
fn private_no_follow(options: &mut OpenOptions) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
}

/// Takes the exclusive lock without waiting: `Ok(false)` when another process has it.
#[cfg(unix)]
fn try_lock(file: &File) -> io::Result<bool> {
    use std::os::unix::io::AsRawFd;
    loop {
        // SAFETY: flock(2) on a descriptor `file` owns for the duration of the call.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// Creates a new, empty, owner-only file with a random name next to `target`, and
/// records it as the pending temporary file.
fn create_temp(target: &Path) -> Result<(PathBuf, File), String> {
    let name = target.file_name().ok_or("not a file name")?;
    let mut pending = lock_pending();
    let mut last_error = None;
    // A name taken (by a planted file or link, or a crashed save) is skipped, never used.
    for _ in 0..16 {
        let mut tmp_name = OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".{:016x}.tmp", fastrand::u64(..)));
        let tmp = target.with_file_name(tmp_name);
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        private_no_follow(&mut options);
        match options.open(&tmp) {
            Ok(file) => {
                *pending = Some(tmp.clone());
                return Ok((tmp, file));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_error = Some(e),
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(format!(
        "cannot create a temporary file in {}: {}",
        parent(target).display(),
        last_error.map_or_else(String::new, |e| e.to_string())
    ))
}

/// Fills the new file, gives it the permissions of `like` if that exists, and flushes
/// it to disk.
fn write_temp(mut file: File, bytes: &[u8], like: Option<&Path>) -> io::Result<()> {
    if let Some(meta) = like.and_then(|like| fs::metadata(like).ok()) {
        // fchmod on our own descriptor: no path, so no link to follow.
        file.set_permissions(meta.permissions())?;
    }
    file.write_all(bytes)?;
    file.sync_all()
}

/// Debug builds only: lets the end-to-end tests stop a save at its most delicate point.
mod test_hooks {
    /// With `PANTO_TEST_PAUSE_SAVE=FILE`, a save creates FILE once its temporary file is
    /// written and then waits (up to a minute) before renaming it: the test interrupts
    /// panto there and checks that nothing is left behind.
    #[cfg(debug_assertions)]
    pub fn pause_before_rename() {
        let Some(marker) = std::env::var_os("PANTO_TEST_PAUSE_SAVE") else {
            return;
        };
        let _ = std::fs::write(marker, b"");
        std::thread::sleep(std::time::Duration::from_secs(60));
    }

    #[cfg(not(debug_assertions))]
    pub fn pause_before_rename() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("panto-session-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    #[cfg(unix)]
    #[test]
    fn links_are_followed_to_the_final_target() {
        use std::os::unix::fs::symlink;
        let dir = temp_dir("resolve");
        fs::create_dir_all(dir.join("real")).expect("dir");
        symlink("real/s.json", dir.join("one")).expect("link");
        symlink(dir.join("one"), dir.join("two")).expect("link");
        // Dangling: the conversation will be created at the target.
        assert_eq!(resolve(&dir.join("two")).unwrap(), dir.join("real/s.json"));
        symlink("loop", dir.join("loop")).expect("link");
        assert!(resolve(&dir.join("loop")).is_err());
        assert_eq!(resolve(Path::new("plain")).unwrap(), Path::new("plain"));
    }

    #[cfg(unix)]
    #[test]
    fn a_second_lock_on_the_same_file_is_refused() {
        let dir = temp_dir("lock");
        let path = dir.join("s.json");
        let first = Session::open(&path).expect("first lock");
        let second = Session::open(&path).err().expect("second lock refused");
        assert_eq!(second.kind, panto::ErrorKind::Config);
        assert!(second.message.contains("in use by another panto process"));
        drop(first);
        Session::open(&path).expect("free again once the first is gone");
    }

    #[cfg(unix)]
    #[test]
    fn the_temporary_file_is_new_private_and_never_a_link() {
        use std::os::unix::fs::{symlink, PermissionsExt};
        let dir = temp_dir("temp");
        let target = dir.join("s.json");
        let (tmp, _file) = create_temp(&target).expect("temp file");
        assert_eq!(tmp.parent(), Some(dir.as_path()));
        let meta = fs::symlink_metadata(&tmp).expect("temp exists");
        assert!(meta.file_type().is_file());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let (other, _) = create_temp(&target).expect("a second temp file");
        assert_ne!(tmp, other, "names are random");
        // The flags themselves: a link in place of the new file is refused.
        let victim = dir.join("victim");
        fs::write(&victim, "keep").expect("victim");
        let planted = dir.join("planted");
        symlink(&victim, &planted).expect("link");
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        private_no_follow(&mut options);
        assert!(options.open(&planted).is_err());
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
        *lock_pending() = None;
    }
}
