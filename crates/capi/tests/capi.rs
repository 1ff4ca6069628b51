//! Tests of libshoal's C ABI: the C program `tests/c/test_capi.c` compiled against
//! `include/shoal.h` and the built `libshoal.so`, and the argument checks called directly.

use std::ffi::{CStr, CString, c_char};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::ptr;

use shoal::*;

/// The directory holding the `libshoal.so` built for this test run.
///
/// This test binary lives in `target/<profile>/deps/`. Cargo builds the package's cdylib into
/// that same directory before the integration tests, but copies it up to `target/<profile>/`
/// only when the library itself is a requested target (`cargo build`), not for `cargo test`:
/// the copy in the profile directory may be missing or stale, so `deps/` is used first.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("locating the test binary");
    let deps = exe.parent().expect("test binary has a parent directory");
    let profile = deps.parent().expect("deps/ has a parent directory");
    [deps, profile]
        .into_iter()
        .find(|d| d.join("libshoal.so").exists())
        .unwrap_or_else(|| {
            panic!(
                "libshoal.so is in neither {} nor {}: the cdylib should be built before integration tests",
                deps.display(),
                profile.display()
            )
        })
        .to_path_buf()
}

#[test]
fn c_program_passes() {
    let lib_dir = lib_dir();

    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().expect("creating a temporary directory");
    let exe = tmp.path().join("test_capi");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let compile = Command::new(&cc)
        .arg("-std=c11")
        .args(["-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(manifest.join("include"))
        .arg(manifest.join("tests/c/test_capi.c"))
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib_dir)
        .arg("-lshoal")
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .output();
    let compile = match compile {
        Ok(out) => out,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            panic!("C compiler {cc:?} not found: install a C toolchain (e.g. `apt-get install gcc`) or set CC")
        }
        Err(e) => panic!("running C compiler {cc:?}: {e}"),
    };
    assert!(
        compile.status.success(),
        "compiling test_capi.c failed ({}):\n{}{}",
        compile.status,
        String::from_utf8_lossy(&compile.stdout),
        String::from_utf8_lossy(&compile.stderr)
    );

    let data = tmp.path().join("data");
    std::fs::create_dir(&data).expect("creating the data directory");
    // `cargo test` puts `target/<profile>` on LD_LIBRARY_PATH, which outranks the rpath and may
    // hold a stale libshoal.so (see `lib_dir`): put this run's library first.
    let mut search = std::ffi::OsString::from(&lib_dir);
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
        search.push(":");
        search.push(old);
    }
    let run = Command::new(&exe).arg(&data).env("LD_LIBRARY_PATH", search).output().expect("running test_capi");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "test_capi failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}", run.status);
    assert!(stdout.contains("capi: ok"), "test_capi did not report success:\nstdout:\n{stdout}\nstderr:\n{stderr}");
}

fn cstr(s: &str) -> CString {
    CString::new(s).expect("no NUL in test string")
}

const EINVAL: i32 = -libc::EINVAL;

#[test]
fn bad_arguments_are_einval() {
    let tmp = tempfile::tempdir().expect("creating a temporary directory");
    let path = cstr(tmp.path().join("s").to_str().expect("UTF-8 temp path"));
    let posix = cstr("posix");
    let c = cstr("c");
    let o = cstr("o");
    // "\xff" is not UTF-8.
    let bad = CString::new(vec![b'x', 0xff]).expect("no NUL");
    let null: *const c_char = ptr::null();
    let mut buf = [0u8; 16];

    unsafe {
        assert_eq!(shoal_store_mkfs(null, posix.as_ptr(), 1 << 20), EINVAL);
        assert_eq!(shoal_store_mkfs(path.as_ptr(), null, 1 << 20), EINVAL);
        assert_eq!(shoal_store_mkfs(bad.as_ptr(), posix.as_ptr(), 1 << 20), EINVAL);
        assert_eq!(shoal_store_mkfs(path.as_ptr(), cstr("mem").as_ptr(), 1 << 20), EINVAL);
        assert_eq!(shoal_store_mkfs(path.as_ptr(), cstr("zfs").as_ptr(), 1 << 20), EINVAL);
        // A separate directory: a failed block mkfs leaves its `lock` file behind, and mkfs
        // refuses a non-empty directory.
        let small = cstr(tmp.path().join("small").to_str().expect("UTF-8 temp path"));
        assert_eq!(shoal_store_mkfs(small.as_ptr(), cstr("block").as_ptr(), 4096), -libc::ENOSPC);

        let other = cstr(tmp.path().join("other").to_str().expect("UTF-8 temp path"));
        let mut h = ptr::null_mut();
        assert_eq!(shoal_store_mount(other.as_ptr(), &mut h), -libc::ENOENT);
        assert!(h.is_null());
        assert_eq!(shoal_store_mount(path.as_ptr(), ptr::null_mut()), EINVAL);
        assert_eq!(shoal_store_mount(null, &mut h), EINVAL);
        assert_eq!(shoal_store_umount(ptr::null_mut()), EINVAL);

        assert_eq!(shoal_store_mkfs(path.as_ptr(), posix.as_ptr(), 1 << 20), 0);
        assert_eq!(shoal_store_mount(path.as_ptr(), &mut h), 0);
        assert!(!h.is_null());

        assert_eq!(shoal_store_create_collection(ptr::null_mut(), c.as_ptr()), EINVAL);
        assert_eq!(shoal_store_create_collection(h, null), EINVAL);
        assert_eq!(shoal_store_create_collection(h, bad.as_ptr()), EINVAL);
        assert_eq!(shoal_store_create_collection(h, cstr("a/b").as_ptr()), EINVAL);
        assert_eq!(shoal_store_create_collection(h, cstr(&"n".repeat(256)).as_ptr()), -libc::ENAMETOOLONG);
        assert_eq!(shoal_store_create(h, c.as_ptr(), o.as_ptr()), -libc::ENOENT);
        assert_eq!(shoal_store_create_collection(h, c.as_ptr()), 0);
        assert_eq!(shoal_store_create_collection(h, c.as_ptr()), -libc::EEXIST);

        assert_eq!(shoal_store_create(h, null, o.as_ptr()), EINVAL);
        assert_eq!(shoal_store_create(h, c.as_ptr(), bad.as_ptr()), EINVAL);
        assert_eq!(shoal_store_delete(h, c.as_ptr(), null), EINVAL);
        assert_eq!(shoal_store_delete(h, c.as_ptr(), o.as_ptr()), -libc::ENOENT);

        let w = |h, b: *const u8, len, off| shoal_store_write(h, c.as_ptr(), o.as_ptr(), b.cast(), len, off, 0);
        assert_eq!(w(ptr::null_mut(), buf.as_ptr(), 4, 0), i64::from(EINVAL));
        assert_eq!(w(h, ptr::null(), 4, 0), i64::from(EINVAL));
        // A huge length is refused before the buffer is touched.
        assert_eq!(w(h, buf.as_ptr(), u64::MAX, 0), -i64::from(libc::EFBIG));
        assert_eq!(w(h, buf.as_ptr(), 1, u64::MAX), -i64::from(libc::EFBIG));
        assert_eq!(w(h, ptr::null(), 0, 0), 0);
        assert_eq!(w(h, b"abcd".as_ptr(), 4, 0), 4);

        let r = |h, b: *mut u8, len, off| shoal_store_read(h, c.as_ptr(), o.as_ptr(), b.cast(), len, off);
        assert_eq!(r(h, ptr::null_mut(), 4, 0), i64::from(EINVAL));
        assert_eq!(r(h, ptr::null_mut(), 0, 0), 0);
        assert_eq!(r(h, buf.as_mut_ptr(), 2, 1), 2);
        assert_eq!(&buf[..2], b"bc");
        assert_eq!(r(h, buf.as_mut_ptr(), 16, 0), 4);
        assert_eq!(r(h, buf.as_mut_ptr(), 16, 4), 0);
        assert_eq!(r(h, buf.as_mut_ptr(), 16, 5), i64::from(EINVAL));
        assert_eq!(shoal_store_read(h, c.as_ptr(), null, buf.as_mut_ptr().cast(), 1, 0), i64::from(EINVAL));

        let mut size = 0u64;
        let mut mtime = 0i64;
        assert_eq!(shoal_store_status(h, c.as_ptr(), o.as_ptr(), &mut size, ptr::null_mut()), 0);
        assert_eq!(size, 4);
        assert_eq!(shoal_store_status(h, c.as_ptr(), o.as_ptr(), ptr::null_mut(), &mut mtime), 0);
        assert!(mtime > 0);
        assert_eq!(shoal_store_status(ptr::null_mut(), c.as_ptr(), o.as_ptr(), &mut size, &mut mtime), EINVAL);

        assert_eq!(shoal_store_umount(h), 0);
    }
}

#[test]
fn strerror_covers_the_library_errnos() {
    let text = |e| unsafe { CStr::from_ptr(shoal_store_strerror(e)) }.to_str().expect("UTF-8").to_string();
    let unknown = text(12345);
    assert_eq!(unknown, "unknown error");
    assert_eq!(text(i32::MIN), unknown);
    assert_eq!(text(0), "success");
    for e in [
        libc::ENOENT,
        libc::EEXIST,
        libc::EBUSY,
        libc::ENOSPC,
        libc::EINVAL,
        libc::ENAMETOOLONG,
        libc::ENOTEMPTY,
        libc::EFBIG,
        libc::EBADMSG,
        libc::EUCLEAN,
        libc::EIO,
    ] {
        let msg = text(-e);
        assert!(!msg.is_empty() && msg != unknown, "errno {e} has no description");
        assert_eq!(msg, text(e), "errno {e}: negative and positive differ");
    }
}
