//! Reading the files an operator names (the config, scripts and their modules, access lists)
//! and the files hotpath keeps in its data directory, with a bound: a path that names
//! `/dev/zero`, a FIFO, a socket or a directory is refused at once with a message, instead of
//! reading without end or waiting for a writer that never comes, and a regular file larger
//! than its bound is refused before it is read.
//!
//! Owns: [`read_bounded`]. Must not: parse what it reads.

use std::fs::File;
use std::io::{Error, ErrorKind, Read as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// The whole of the regular file at `path` (symbolic links followed), at most `max` bytes.
/// The file is opened without blocking (opening a FIFO would wait for a writer) and its type
/// is checked on the open file, so what is read is what was checked. A file that grows past
/// `max` while it is read is refused too. Errors say what is wrong: not a regular file, or
/// larger than `max` bytes; a missing file keeps its [`ErrorKind::NotFound`].
pub fn read_bounded(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "not a regular file (a device, FIFO, socket or directory is never read)",
        ));
    }
    let too_large = |len: u64| {
        Error::new(
            ErrorKind::InvalidData,
            format!("{len} bytes or more, larger than the {max} bytes it may have"),
        )
    };
    if meta.len() > max {
        return Err(too_large(meta.len()));
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(too_large(out.len() as u64));
    }
    Ok(out)
}

/// [`read_bounded`], as UTF-8 text.
pub fn read_bounded_text(path: &Path, max: u64) -> std::io::Result<String> {
    String::from_utf8(read_bounded(path, max)?)
        .map_err(|_| Error::new(ErrorKind::InvalidData, "not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("hotpath-file-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn only_regular_files_within_their_bound_are_read() {
        let d = dir();
        let f = d.join("small");
        std::fs::write(&f, b"0123456789").unwrap();
        assert_eq!(read_bounded(&f, 10).unwrap(), b"0123456789");
        let e = read_bounded(&f, 9).unwrap_err();
        assert!(e.to_string().contains("larger than the 9 bytes"), "{e}");
        // A device that never ends, a directory, a FIFO with no writer: refused at once.
        for p in [Path::new("/dev/zero"), d.as_path()] {
            let e = read_bounded(p, 1 << 20).unwrap_err();
            assert!(e.to_string().contains("not a regular file"), "{p:?}: {e}");
        }
        let fifo = d.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let e = read_bounded(&fifo, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = read_bounded(&d.join("missing"), 1).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        std::fs::write(&f, [0xff, 0xfe]).unwrap();
        let e = read_bounded_text(&f, 10).unwrap_err();
        assert!(e.to_string().contains("not UTF-8"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
