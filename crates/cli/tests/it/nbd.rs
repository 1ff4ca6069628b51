//! Block images served over NBD, driven by real clients (issue 10): `shoal rbd` manages images
//! on a RAM cluster, `shoal nbd serve` exports them, and nbdinfo, qemu-io, qemu-img and nbdcopy
//! read and write them unchanged; a raw client checks what those clients never send (requests
//! past the end, oversized requests, malformed frames).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::common;

use common::{fails_with, ok, shoal, up_mem};

/// An NBD server child, killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Server {
    /// Stops the server with SIGTERM (it releases its locks) and waits for it.
    fn stop(mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    shoal_net::ports::unused_loopback_port().unwrap().port()
}

/// Starts `shoal nbd serve` with `where_args` (`--listen ...` or `--socket ...`) and `args`,
/// logging to `log` in `dir` (appended, so a restarted server's log follows its predecessor's).
fn spawn_server(dir: &Path, log: &str, where_args: &[&str], args: &[&str]) -> Server {
    let log = std::fs::File::options().create(true).append(true).open(dir.join(log)).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["nbd", "serve"])
        .args(where_args)
        .args(args)
        .env("SHOAL_CONF", dir.join("shoal.toml"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    Server(child)
}

/// Waits until `connect` succeeds (the server listens), failing the test after 30 s.
fn wait_listening(what: &str, connect: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !connect() {
        assert!(std::time::Instant::now() < deadline, "the NBD server did not listen on {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A server on a free loopback port, once it listens; returns it with the port.
fn serve(dir: &Path, args: &[&str]) -> (Server, u16) {
    let port = free_port();
    (serve_on(dir, port, args), port)
}

/// A server on a given TCP port (so that a restarted one is found where the old one was), once
/// it listens.
fn serve_on(dir: &Path, port: u16, args: &[&str]) -> Server {
    let listen = format!("127.0.0.1:{port}");
    let server = spawn_server(dir, &format!("nbd-{port}.log"), &["--listen", &listen], args);
    wait_listening(&listen, || TcpStream::connect(&listen).is_ok());
    server
}

/// A server on a unix socket, once it accepts connections there.
fn serve_socket(dir: &Path, socket: &Path, args: &[&str]) -> Server {
    let path = socket.display().to_string();
    let server = spawn_server(dir, "nbd-socket.log", &["--socket", &path], args);
    wait_listening(&path, || std::os::unix::net::UnixStream::connect(socket).is_ok());
    server
}

/// Runs a client tool; returns stdout, failing the test with its stderr if it failed.
fn tool(program: &str, args: &[&str]) -> String {
    let out =
        Command::new(program).args(args).stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn tool_fails(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).stdin(Stdio::null()).output().unwrap();
    assert!(!out.status.success(), "{program} {args:?} should have failed");
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// A minimal NBD client speaking the protocol directly (fixed newstyle, EXPORT_NAME, simple
/// replies), for the requests real clients refuse to send.
struct Raw(TcpStream);

impl Raw {
    fn connect(port: u16, export: &str) -> (Raw, u64) {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
        let mut greeting = [0u8; 18];
        s.read_exact(&mut greeting).unwrap();
        assert_eq!(&greeting[..8], b"NBDMAGIC");
        assert_eq!(&greeting[8..16], b"IHAVEOPT");
        s.write_all(&3u32.to_be_bytes()).unwrap(); // fixed newstyle, no zeroes
        let mut opt = b"IHAVEOPT".to_vec();
        opt.extend_from_slice(&1u32.to_be_bytes());
        opt.extend_from_slice(&(export.len() as u32).to_be_bytes());
        opt.extend_from_slice(export.as_bytes());
        s.write_all(&opt).unwrap();
        let mut info = [0u8; 10];
        s.read_exact(&mut info).unwrap();
        (Raw(s), u64::from_be_bytes(info[..8].try_into().unwrap()))
    }

    fn send(&mut self, kind: u16, cookie: u64, offset: u64, length: u32, data: &[u8]) {
        let mut r = 0x2560_9513u32.to_be_bytes().to_vec();
        r.extend_from_slice(&0u16.to_be_bytes());
        r.extend_from_slice(&kind.to_be_bytes());
        r.extend_from_slice(&cookie.to_be_bytes());
        r.extend_from_slice(&offset.to_be_bytes());
        r.extend_from_slice(&length.to_be_bytes());
        r.extend_from_slice(data);
        self.0.write_all(&r).unwrap();
    }

    /// Reads a simple reply: (error, cookie), then `data_len` bytes if it succeeded.
    fn reply(&mut self, data_len: usize) -> (u32, u64, Vec<u8>) {
        let mut h = [0u8; 16];
        self.0.read_exact(&mut h).unwrap();
        assert_eq!(u32::from_be_bytes(h[..4].try_into().unwrap()), 0x6744_6698, "reply magic");
        let error = u32::from_be_bytes(h[4..8].try_into().unwrap());
        let cookie = u64::from_be_bytes(h[8..16].try_into().unwrap());
        let mut data = vec![0u8; if error == 0 { data_len } else { 0 }];
        self.0.read_exact(&mut data).unwrap();
        (error, cookie, data)
    }

    /// Whether the server has closed the connection.
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.0.read(&mut b), Ok(0) | Err(_))
    }
}

#[test]
fn images_are_created_and_served_over_nbd_to_real_clients() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _down) = up_mem(tmp.path(), 1, "2G");

    // Images: create, ls, info, and clear errors for bad input.
    let created = json(&ok(&shoal(&dir, &["rbd", "create", "data/disk", "--size", "64M", "--json"])));
    assert_eq!(created["size_bytes"], 64 << 20);
    assert_eq!(created["object_size_bytes"], 4 << 20);
    ok(&shoal(
        &dir,
        &[
            "rbd",
            "create",
            "data/striped",
            "--size",
            "8M",
            "--object-size",
            "1M",
            "--stripe-unit",
            "64K",
            "--stripe-count",
            "4",
        ],
    ));
    let listed = json(&ok(&shoal(&dir, &["rbd", "ls", "data", "--json"])));
    assert_eq!(listed["images"], serde_json::json!(["disk", "striped"]));
    let info = json(&ok(&shoal(&dir, &["rbd", "info", "data/striped", "--json"])));
    assert_eq!(info["stripe_count"], 4);
    assert!(info["features"].as_array().unwrap().iter().any(|f| f == "striping"), "{info}");
    fails_with(&shoal(&dir, &["rbd", "create", "data/disk", "--size", "1M"]), "already exists");
    fails_with(&shoal(&dir, &["rbd", "create", "nopool/x", "--size", "1M"]), "nopool");
    fails_with(&shoal(&dir, &["rbd", "create", "data/odd", "--size", "1M", "--object-size", "3M"]), "power of two");
    fails_with(&shoal(&dir, &["rbd", "create", "data", "--size", "1M"]), "POOL/IMAGE");
    fails_with(&shoal(&dir, &["rbd", "info", "data/missing"]), "does not exist");

    let (server, port) = serve(&dir, &["data/disk", "data/striped"]);
    let uri = format!("nbd://127.0.0.1:{port}/data/disk");
    let striped = format!("nbd://127.0.0.1:{port}/data/striped");

    // What the server offers.
    let info = json(&tool("nbdinfo", &["--json", &uri]));
    let export = &info["exports"][0];
    assert_eq!(export["export-size"], 64 << 20, "{info}");
    for flag in ["can_flush", "can_fua", "can_trim", "can_zero", "can_fast_zero", "can_multi_conn", "can_cache"] {
        assert_eq!(export[flag], true, "{flag}: {info}");
    }
    assert_eq!(export["is_read_only"], false);
    assert!(export["contexts"].as_array().unwrap().iter().any(|c| c == "base:allocation"), "{info}");
    let list = tool("nbdinfo", &["--list", "--json", &format!("nbd://127.0.0.1:{port}")]);
    assert!(list.contains("data/disk") && list.contains("data/striped"), "{list}");
    // The empty export name is the first image.
    let default = json(&tool("nbdinfo", &["--json", &format!("nbd://127.0.0.1:{port}")]));
    assert_eq!(default["exports"][0]["export-size"], 64 << 20);
    let unknown = tool_fails("nbdinfo", &[&format!("nbd://127.0.0.1:{port}/data/nope")]);
    assert!(unknown.contains("data/nope") || unknown.to_lowercase().contains("unknown"), "{unknown}");

    // Patterned writes and reads, unaligned, with FUA, flush and write-zeroes, on both layouts.
    for u in [&uri, &striped] {
        tool(
            "qemu-io",
            &[
                "-f",
                "raw",
                "-c",
                "write -P 0xab 0 1M",
                "-c",
                "write -P 0xcd 1000001 3333",
                "-c",
                "write -f -P 0x11 2M 64k",
                "-c",
                "write -z 4096 8192",
                "-c",
                "flush",
                "-c",
                "read -P 0xab 0 4096",
                "-c",
                "read -P 0 4096 8192",
                "-c",
                "read -P 0xab 12288 987713",
                "-c",
                "read -P 0xcd 1000001 3333",
                "-c",
                "read -P 0x11 2M 64k",
                "-c",
                "read -P 0 5M 1M",
                u,
            ],
        );
    }

    // A 64 MiB image with holes converted into the export, compared, and its holes seen.
    let src = tmp.path().join("src.raw");
    let f = std::fs::File::create(&src).unwrap();
    f.set_len(64 << 20).unwrap();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut noise = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng as u8
            })
            .collect()
    };
    use std::os::unix::fs::FileExt;
    f.write_all_at(&noise(3 << 20), 5 << 20).unwrap();
    f.write_all_at(&noise(7 * 4096 + 5), 40 << 20).unwrap();
    drop(f);
    let src_s = src.display().to_string();
    tool("qemu-img", &["convert", "-n", "-f", "raw", "-O", "raw", &src_s, &uri]);
    let same = tool("qemu-img", &["compare", "-f", "raw", "-F", "raw", &src_s, &uri]);
    assert!(same.contains("identical"), "{same}");
    let map = json(&tool("nbdinfo", &["--map", "--json", &uri]));
    let holes: u64 = map
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"].as_u64().unwrap_or(0) & 1 == 1)
        .map(|e| e["length"].as_u64().unwrap())
        .sum();
    // Everything but the two data runs' objects (4 MiB each: 2 objects, then 1) is a hole.
    assert!(holes >= (64 - 12) << 20, "only {holes} bytes of holes: {map}");

    // nbdcopy round trip.
    let back = tmp.path().join("back.raw");
    tool("nbdcopy", &[&uri, &back.display().to_string()]);
    assert!(std::fs::read(&src).unwrap() == std::fs::read(&back).unwrap(), "nbdcopy read back other bytes");

    // What real clients never send: requests past the end, oversized and malformed ones.
    let (mut raw, size) = Raw::connect(port, "data/disk");
    assert_eq!(size, 64 << 20);
    raw.send(0, 1, size - 512, 4096, &[]);
    assert_eq!(raw.reply(0).0, 22, "a read past the end is EINVAL");
    raw.send(1, 2, size - 2, 4, b"abcd");
    assert_eq!(raw.reply(0).0, 28, "a write past the end is ENOSPC");
    raw.send(0, 3, 5 << 20, 16, &[]);
    let (error, cookie, data) = raw.reply(16);
    assert_eq!((error, cookie), (0, 3));
    assert_eq!(data, std::fs::read(&src).unwrap()[5 << 20..(5 << 20) + 16]);
    raw.send(0, 4, 0, 64 << 20, &[]);
    assert!(raw.closed(), "an oversized request must end its connection");
    let (mut raw, _) = Raw::connect(port, "data/disk");
    raw.0.write_all(&[0xde; 28]).unwrap();
    assert!(raw.closed(), "a malformed request must end its connection");
    let mut garbage = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let _ = garbage.write_all(b"GET / HTTP/1.1\r\n\r\n");
    drop(garbage);
    // Malformed handshakes: unknown client flags, a wrong option magic, an option too long.
    for bad in [&[0xff, 0xff, 0xff, 0xff][..], &[0, 0, 0, 3, b'X', b'X', b'X', b'X', b'X', b'X', b'X', b'X'][..]] {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
        let mut greeting = [0u8; 18];
        s.read_exact(&mut greeting).unwrap();
        s.write_all(bad).unwrap();
        assert!(Raw(s).closed(), "a malformed handshake must end its connection");
    }
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).unwrap();
    let mut opt = 3u32.to_be_bytes().to_vec();
    opt.extend_from_slice(b"IHAVEOPT");
    opt.extend_from_slice(&7u32.to_be_bytes());
    opt.extend_from_slice(&(1u32 << 30).to_be_bytes());
    s.write_all(&opt).unwrap();
    assert!(Raw(s).closed(), "an option claiming 1 GiB of data must end its connection");
    // The server outlives all of that.
    tool("nbdinfo", &[&uri]);
    // Stopped with SIGTERM, the server releases its lock: the shrink below is refused while one
    // is held.
    server.stop();
    fails_with(&shoal(&dir, &["nbd", "serve", "data/nope", "--listen", "127.0.0.1:0"]), "\"nope\" does not exist");

    // Resize: a reconnecting client sees the new size; shrinking needs --allow-shrink and
    // leaves zeros past the new end if the image grows again.
    let grown = json(&ok(&shoal(&dir, &["rbd", "resize", "data/disk", "--size", "128M", "--json"])));
    assert_eq!(grown["size_bytes"], 128 << 20);
    fails_with(&shoal(&dir, &["rbd", "resize", "data/disk", "--size", "6M"]), "--allow-shrink");
    ok(&shoal(&dir, &["rbd", "resize", "data/disk", "--size", "6M", "--allow-shrink"]));
    ok(&shoal(&dir, &["rbd", "resize", "data/disk", "--size", "64M"]));
    let (server, port) = serve(&dir, &["data/disk"]);
    let uri = format!("nbd://127.0.0.1:{port}/data/disk");
    assert_eq!(json(&tool("nbdinfo", &["--json", &uri]))["exports"][0]["export-size"], 64 << 20);
    let mut expect = std::fs::read(&src).unwrap();
    expect[6 << 20..].fill(0);
    tool("nbdcopy", &[&uri, &back.display().to_string()]);
    assert!(std::fs::read(&back).unwrap() == expect, "a shrink and grow left old bytes past the shrunk end");
    server.stop();

    // Usage, read-only exports, removal.
    let du = json(&ok(&shoal(&dir, &["rbd", "du", "data/disk", "--json"])));
    assert_eq!(du["provisioned_bytes"], 64 << 20);
    // One object is left: 4..6 MiB (the first 4 MiB were zeros, so convert removed it).
    assert_eq!((du["used_bytes"].as_u64(), du["objects"].as_u64()), (Some(2 << 20), Some(1)), "{du}");
    let (_ro, port) = serve(&dir, &["data/disk", "--read-only", "--max-connections", "1"]);
    let uri = format!("nbd://127.0.0.1:{port}/data/disk");
    assert_eq!(json(&tool("nbdinfo", &["--json", &uri]))["exports"][0]["is_read_only"], true);
    tool_fails("qemu-io", &["-f", "raw", "-c", "write 0 4096", &uri]);
    // One client at a time (--max-connections 1): a second waits to be accepted (no greeting)
    // until the first leaves, then is served.
    let (first, _) = Raw::connect(port, "data/disk");
    let mut second = TcpStream::connect(("127.0.0.1", port)).unwrap();
    second.set_read_timeout(Some(std::time::Duration::from_secs(1))).unwrap();
    let mut greeting = [0u8; 18];
    assert!(second.read_exact(&mut greeting).is_err(), "a second client was served past --max-connections 1");
    drop(first);
    second.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    second.read_exact(&mut greeting).expect("the second client is served once the first left");
    assert_eq!(&greeting[..8], b"NBDMAGIC");
    drop(second);
    ok(&shoal(&dir, &["rbd", "rm", "data/disk"]));
    ok(&shoal(&dir, &["rbd", "rm", "data/striped", "--json"]));
    // A thin image of a pebibyte (268 million object numbers): usage and removal list what it
    // holds instead of visiting every number.
    let six = tmp.path().join("six-mib");
    std::fs::write(&six, (0..6 << 20).map(|i: u32| (i % 251) as u8 + 1).collect::<Vec<u8>>()).unwrap();
    ok(&shoal(&dir, &["rbd", "import", &six.display().to_string(), "data/huge"]));
    ok(&shoal(&dir, &["rbd", "resize", "data/huge", "--size", "1P"]));
    let du = json(&ok(&shoal(&dir, &["rbd", "du", "data/huge", "--json"])));
    assert_eq!(du["provisioned_bytes"], 1u64 << 50, "{du}");
    assert_eq!((du["used_bytes"].as_u64(), du["objects"].as_u64()), (Some(6 << 20), Some(2)), "{du}");
    ok(&shoal(&dir, &["rbd", "rm", "data/huge"]));
    assert_eq!(json(&ok(&shoal(&dir, &["rbd", "ls", "data", "--json"])))["images"], serde_json::json!([]));
    let left = ok(&shoal(&dir, &["obj", "ls", "-p", "data"]));
    assert!(left.lines().all(|l| !l.starts_with("rbd_data") && !l.starts_with("rbd_header")), "{left}");
}

#[test]
fn one_writer_at_a_time_and_a_killed_server_loses_no_acknowledged_write() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _down) = up_mem(tmp.path(), 1, "2G");
    ok(&shoal(&dir, &["rbd", "create", "data/vol", "--size", "96M"]));
    let lease = ["--lock-lease-s", "2"];
    let (mut first, port) = serve(&dir, &[&["data/vol"][..], &lease].concat());
    let uri = format!("nbd://127.0.0.1:{port}/data/vol");

    // A second writable server is refused, naming the holder; the lock is visible.
    let second = shoal(&dir, &[&["nbd", "serve", "data/vol", "--listen", "127.0.0.1:0"][..], &lease].concat());
    fails_with(&second, "is locked by nbd serve 127.0.0.1:");
    let locks = json(&ok(&shoal(&dir, &["rbd", "lock", "ls", "data/vol", "--json"])));
    assert_eq!(locks["locks"][0]["stale"], false, "{locks}");
    assert!(locks["locks"][0]["description"].as_str().unwrap().contains(&port.to_string()), "{locks}");
    // A shrink would be a second writer (it zeroes the cut-off end): refused while the lock is
    // held. A grow only raises the size, which the server sees when it reopens the image.
    fails_with(&shoal(&dir, &["rbd", "resize", "data/vol", "--size", "64M", "--allow-shrink"]), "is locked by");
    ok(&shoal(&dir, &["rbd", "resize", "data/vol", "--size", "128M"]));
    // Removing the image under a live server is refused the same way; the image stays.
    fails_with(&shoal(&dir, &["rbd", "rm", "data/vol"]), "is locked by");
    ok(&shoal(&dir, &["rbd", "info", "data/vol"]));

    // fio's nbd engine: concurrent random writes, verified.
    let fio_out = tmp.path().join("fio.json");
    fio_verify(&uri, &fio_out, &["--name=verify", "--do_verify=1", "--output-format=json"]);
    let report = json(&std::fs::read_to_string(&fio_out).unwrap());
    assert_eq!(report["jobs"][0]["error"], 0, "{report}");

    // Patterned writes, each acknowledged before the next; then a large write in flight when
    // the server is killed with SIGKILL.
    for i in 0..8u64 {
        tool("qemu-io", &["-f", "raw", "-c", &format!("write -P {} {}M 1M", 0x40 + i, i * 4), &uri]);
    }
    let mut in_flight = Command::new("qemu-io")
        .args(["-f", "raw", "-c", "write -P 0x99 32M 32M", &uri])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(30));
    first.0.kill().unwrap();
    let _ = first.0.wait();
    let _ = in_flight.wait();

    // A new server takes over once the dead one's lease lapses, and every acknowledged write is
    // there; the write cut short is whole or partly there, never anything else. This server runs
    // on a multi-thread runtime (the first ran on one thread, the default), so the file system
    // below and the verify also cover connections served across threads.
    let (_again, port) = serve(&dir, &[&["data/vol", "--threads", "2"][..], &lease].concat());
    let uri = format!("nbd://127.0.0.1:{port}/data/vol");
    for i in 0..8u64 {
        tool("qemu-io", &["-f", "raw", "-c", &format!("read -P {} {}M 1M", 0x40 + i, i * 4), &uri]);
    }
    let back = tmp.path().join("vol.raw");
    tool("nbdcopy", &[&uri, &back.display().to_string()]);
    let bytes = std::fs::read(&back).unwrap();
    assert!(bytes[32 << 20..64 << 20].iter().all(|&b| b == 0 || b == 0x99), "the interrupted write left other bytes");
    fio_verify(&uri, &fio_out, &["--name=verify-after", "--verify_only"]);

    // A kernel file system on the image (nbdfuse + a loop device), checked clean after unmount.
    if Path::new("/dev/fuse").exists()
        && Command::new("losetup").arg("--version").output().is_ok_and(|o| o.status.success())
    {
        ext4_round_trip(tmp.path(), &uri);
    }

    // Breaking a live server's lock fences it off at once (its lease would let it write for
    // seconds more): its writes fail with EPERM, and a new server takes the lock without waiting
    // for a lease and serves the image (decision 0092).
    let broke = json(&ok(&shoal(&dir, &["rbd", "lock", "break", "data/vol", "--json"])));
    assert!(broke["fenced"]["epoch"].as_u64().is_some_and(|e| e > 0), "{broke}");
    let refused = tool_fails("qemu-io", &["-f", "raw", "-c", "write -P 0x77 0 4096", &uri]);
    assert!(refused.contains("Operation not permitted"), "{refused}");
    let (_third, port) = serve(&dir, &[&["data/vol"][..], &lease].concat());
    let uri = format!("nbd://127.0.0.1:{port}/data/vol");
    qemu_io(&uri, &["write -P 0x77 0 4096", "read -P 0x77 0 4096"]);
}

/// qemu-io commands `cmds` against `uri`, each its own `-c`.
fn qemu_io(uri: &str, cmds: &[&str]) {
    qemu_io_with(&[], uri, cmds);
}

/// qemu-io opening `uri` read-only (as a read-only export requires).
fn qemu_io_ro(uri: &str, cmds: &[&str]) {
    qemu_io_with(&["-r"], uri, cmds);
}

fn qemu_io_with(flags: &[&str], uri: &str, cmds: &[&str]) {
    let mut args = flags.to_vec();
    args.extend(["-f", "raw"]);
    for c in cmds {
        args.extend(["-c", c]);
    }
    args.push(uri);
    tool("qemu-io", &args);
}

#[test]
fn snapshots_clones_and_rollback_of_a_live_image() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _down) = up_mem(tmp.path(), 1, "2G");
    ok(&shoal(&dir, &["rbd", "create", "data/base", "--size", "16M"]));
    let (base_server, port) = serve(&dir, &["data/base"]);
    let base = format!("nbd://127.0.0.1:{port}/data/base");
    qemu_io(&base, &["write -P 0x11 0 16M"]);

    // A snapshot of the image while its server writes it: the server adopts it first.
    let s1 = json(&ok(&shoal(&dir, &["rbd", "snap", "create", "data/base@s1", "--json"])));
    assert_eq!((s1["name"].as_str(), s1["size_bytes"].as_u64()), (Some("s1"), Some(16 << 20)), "{s1}");
    fails_with(&shoal(&dir, &["rbd", "snap", "create", "data/base@s1"]), "snapshot \"base@s1\" already exists");
    fails_with(&shoal(&dir, &["rbd", "snap", "create", "data/base@a/b"]), "POOL/IMAGE@SNAP");
    qemu_io(&base, &["write -P 0x22 0 1M", "write -P 0x22 5M 1M", "write -z 12M 4M"]);
    qemu_io(&base, &["read -P 0x22 0 1M", "read -P 0x11 1M 4M", "read -P 0x22 5M 1M", "read -P 0 12M 4M"]);

    // The snapshot's read-only export still holds the old bytes; the live one the new.
    let (_snap_server, sport) = serve(&dir, &["data/base@s1"]);
    let snap_uri = format!("nbd://127.0.0.1:{sport}/data/base@s1");
    let info = json(&tool("nbdinfo", &["--json", &snap_uri]));
    assert_eq!(info["exports"][0]["is_read_only"], true, "{info}");
    qemu_io_ro(&snap_uri, &["read -P 0x11 0 16M"]);
    tool_fails("qemu-io", &["-f", "raw", "-c", "write 0 4096", &snap_uri]);
    let listed = json(&ok(&shoal(&dir, &["rbd", "snap", "ls", "data/base", "--json"])));
    assert_eq!(listed["snapshots"].as_array().map(Vec::len), Some(1), "{listed}");

    // Export (a snapshot to a sparse file, the live image to stdout) and import back.
    let snap_file = tmp.path().join("s1.raw");
    let snap_path = snap_file.display().to_string();
    let exported = json(&ok(&shoal(&dir, &["rbd", "export", "data/base@s1", &snap_path, "--json"])));
    assert_eq!(exported["size_bytes"], 16 << 20, "{exported}");
    assert!(std::fs::read(&snap_file).unwrap().iter().all(|&b| b == 0x11), "the snapshot exported other bytes");
    let live = shoal(&dir, &["rbd", "export", "data/base", "-"]);
    assert!(live.status.success(), "{}", String::from_utf8_lossy(&live.stderr));
    let mut want = vec![0x11u8; 16 << 20];
    want[..1 << 20].fill(0x22);
    want[5 << 20..6 << 20].fill(0x22);
    want[12 << 20..].fill(0);
    assert!(live.stdout == want, "the live image exported to stdout other bytes");
    let live_file = tmp.path().join("live.raw");
    std::fs::write(&live_file, &live.stdout).unwrap();
    let live_path = live_file.display().to_string();
    let imported = json(&ok(&shoal(&dir, &["rbd", "import", &live_path, "data/copy", "--json"])));
    // Zero chunks are not written: the last 4 MiB were zeros.
    assert_eq!((imported["size_bytes"].as_u64(), imported["data_bytes"].as_u64()), (Some(16 << 20), Some(12 << 20)));
    let du = json(&ok(&shoal(&dir, &["rbd", "du", "data/copy", "--json"])));
    assert_eq!(du["objects"], 3, "{du}");
    let back = shoal(&dir, &["rbd", "export", "data/copy", "-"]);
    assert!(back.stdout == want, "an imported image exported other bytes");
    fails_with(&shoal(&dir, &["rbd", "import", "-", "data/x"]), "needs --size");
    fails_with(&shoal(&dir, &["rbd", "import", "/nonexistent/file", "data/x"]), "/nonexistent/file");
    // rbd bench: writes refused while a server holds the image; counted operations otherwise.
    fails_with(&shoal(&dir, &["rbd", "bench", "data/base", "--io-type", "write", "--io-total", "1M"]), "locked");
    let args = ["rbd", "bench", "data/copy", "--io-size", "4K", "--io-total", "2M", "--io-pattern", "rand", "--json"];
    for io in ["write", "read"] {
        let r = json(&ok(&shoal(&dir, &[&args[..], &["--io-type", io]].concat())));
        assert_eq!((r["ops"].as_u64(), r["bytes"].as_u64()), (Some(512), Some(2 << 20)), "{r}");
        assert!(
            r["ops_per_s"].as_f64().unwrap() > 0.0 && r["p99_us"].as_u64().unwrap() >= r["p50_us"].as_u64().unwrap()
        );
    }
    fails_with(&shoal(&dir, &["rbd", "bench", "data/copy", "--io-type", "read", "--io-size", "64M"]), "io size");
    ok(&shoal(&dir, &["rbd", "rm", "data/copy"]));

    // A clone of the protected snapshot reads through to it and copies up on first write.
    fails_with(&shoal(&dir, &["rbd", "clone", "data/base@s1", "data/child"]), "not protected");
    ok(&shoal(&dir, &["rbd", "snap", "protect", "data/base@s1"]));
    fails_with(&shoal(&dir, &["rbd", "snap", "rm", "data/base@s1"]), "protected");
    ok(&shoal(&dir, &["rbd", "clone", "data/base@s1", "data/child"]));
    let kids = json(&ok(&shoal(&dir, &["rbd", "children", "data/base@s1", "--json"])));
    assert_eq!(kids["children"], serde_json::json!(["child"]));
    fails_with(&shoal(&dir, &["rbd", "snap", "unprotect", "data/base@s1"]), "has clones (child)");
    let (child_server, cport) = serve(&dir, &["data/child"]);
    let child = format!("nbd://127.0.0.1:{cport}/data/child");
    qemu_io(&child, &["read -P 0x11 0 16M"]);
    qemu_io(&child, &["write -P 0x33 100k 4k", "write -z 8M 4M", "write -z 4M 4k"]);
    qemu_io(&child, &["read -P 0x11 0 100k", "read -P 0x33 100k 4k", "read -P 0x11 104k 3992k", "read -P 0 4M 4k"]);
    qemu_io(&child, &["read -P 0x11 4100k 4092k", "read -P 0 8M 4M", "read -P 0x11 12M 4M"]);
    // The parent is untouched by the child's writes.
    qemu_io_ro(&snap_uri, &["read -P 0x11 0 16M"]);
    drop(child_server);

    // Flatten: the child keeps its bytes and no longer needs the parent.
    ok(&shoal(&dir, &["rbd", "flatten", "data/child"]));
    assert_eq!(json(&ok(&shoal(&dir, &["rbd", "info", "data/child", "--json"])))["parent"], serde_json::Value::Null);
    ok(&shoal(&dir, &["rbd", "snap", "unprotect", "data/base@s1"]));
    let (child_again, cport) = serve(&dir, &["data/child"]);
    let child = format!("nbd://127.0.0.1:{cport}/data/child");
    qemu_io(&child, &["read -P 0x33 100k 4k", "read -P 0 8M 4M", "read -P 0x11 12M 4M", "read -P 0 4M 4k"]);

    // Rollback is refused while a server holds the image, then brings the snapshot back.
    fails_with(&shoal(&dir, &["rbd", "snap", "rollback", "data/base@s1"]), "is locked by");
    base_server.stop();
    ok(&shoal(&dir, &["rbd", "snap", "rollback", "data/base@s1"]));
    let (base_again, port) = serve(&dir, &["data/base"]);
    let base = format!("nbd://127.0.0.1:{port}/data/base");
    qemu_io(&base, &["read -P 0x11 0 16M"]);

    // An image with snapshots is not removed; its snapshots go first, clones and all.
    fails_with(&shoal(&dir, &["rbd", "rm", "data/base"]), "snapshot");
    ok(&shoal(&dir, &["rbd", "snap", "rm", "data/base@s1", "--json"]));
    base_again.stop();
    ok(&shoal(&dir, &["rbd", "rm", "data/base"]));
    fails_with(&shoal(&dir, &["rbd", "rm", "data/child"]), "is locked by");
    child_again.stop();
    ok(&shoal(&dir, &["rbd", "rm", "data/child"]));
    let left = ok(&shoal(&dir, &["obj", "ls", "-p", "data"]));
    assert!(left.lines().all(|l| !l.starts_with("rbd_data")), "{left}");
}

/// fio's nbd engine over 16 MiB at 64 MiB of `uri`: 4 KiB random writes at iodepth 16 with
/// crc32c verification, a repeatable sequence (so `--verify_only` checks an earlier run).
#[test]
fn snapshots_of_a_huge_thin_image_find_objects_that_exist_only_as_clones() {
    // A 1 TiB image has 262,144 object numbers, more than the pool has PGs: whole-image
    // operations list its objects instead of visiting every number, and snapshot operations
    // must also find the objects whose head was removed after the snapshot.
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _down) = up_mem(tmp.path(), 1, "1G");
    let eight = tmp.path().join("eight-mib");
    let bytes: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8 + 1).collect();
    std::fs::write(&eight, &bytes).unwrap();
    ok(&shoal(&dir, &["rbd", "import", &eight.display().to_string(), "data/huge"]));
    ok(&shoal(&dir, &["rbd", "snap", "create", "data/huge@s1"]));
    // The shrink removes object 1 (4..8 MiB): after it, only its snapshot clone holds it.
    ok(&shoal(&dir, &["rbd", "resize", "data/huge", "--size", "4M", "--allow-shrink"]));
    ok(&shoal(&dir, &["rbd", "resize", "data/huge", "--size", "1T"]));
    let du = json(&ok(&shoal(&dir, &["rbd", "du", "data/huge", "--json"])));
    assert_eq!((du["used_bytes"].as_u64(), du["objects"].as_u64()), (Some(4 << 20), Some(1)), "{du}");
    // Rollback brings object 1 back from its clone, and the snapshot's size.
    ok(&shoal(&dir, &["rbd", "snap", "rollback", "data/huge@s1"]));
    let back = tmp.path().join("back");
    ok(&shoal(&dir, &["rbd", "export", "data/huge", &back.display().to_string()]));
    assert!(std::fs::read(&back).unwrap() == bytes, "rollback of a huge image lost an object held only as a clone");
    // The same again at 1 TiB, then the snapshot's removal trims the clones and the image goes.
    ok(&shoal(&dir, &["rbd", "resize", "data/huge", "--size", "4M", "--allow-shrink"]));
    ok(&shoal(&dir, &["rbd", "resize", "data/huge", "--size", "1T"]));
    // Exported to a file, only what it holds is read and written: a 1 TiB sparse file with
    // 4 MiB of data.
    let sparse = tmp.path().join("sparse");
    let out = json(&ok(&shoal(&dir, &["rbd", "export", "data/huge", &sparse.display().to_string(), "--json"])));
    assert_eq!((out["size_bytes"].as_u64(), out["data_bytes"].as_u64()), (Some(1 << 40), Some(4 << 20)), "{out}");
    let meta = std::fs::metadata(&sparse).unwrap();
    assert_eq!(meta.len(), 1 << 40);
    assert!(std::os::unix::fs::MetadataExt::blocks(&meta) * 512 <= 8 << 20, "the export wrote more than the data");
    let mut head = vec![0u8; 8 << 20];
    std::os::unix::fs::FileExt::read_exact_at(&std::fs::File::open(&sparse).unwrap(), &mut head, 0).unwrap();
    assert!(head[..4 << 20] == bytes[..4 << 20] && head[4 << 20..].iter().all(|b| *b == 0), "exported bytes");
    std::fs::remove_file(&sparse).unwrap();
    // A striped 1 TiB image written in two places through NBD exports the same way: each object
    // found stands for its object set (the 4 KiB write lands in the set's first object, 12 MiB
    // into the set's 16 MiB).
    let stripes = ["--stripe-unit", "64K", "--stripe-count", "4"];
    ok(&shoal(&dir, &[&["rbd", "create", "data/striped", "--size", "1T"][..], &stripes].concat()));
    let (server, port) = serve(&dir, &["data/striped"]);
    let far = (512u64 << 30) + (12 << 20) + 7;
    let uri = format!("nbd://127.0.0.1:{port}/data/striped");
    qemu_io(&uri, &["write -P 0xab 0 1M", &format!("write -P 0xcd {far} 4k")]);
    server.stop();
    let out = json(&ok(&shoal(&dir, &["rbd", "export", "data/striped", &sparse.display().to_string(), "--json"])));
    assert_eq!(out["data_bytes"].as_u64(), Some(8 << 20), "two 4 MiB chunks hold data: {out}");
    let file = std::fs::File::open(&sparse).unwrap();
    let mut got = vec![0u8; 2 << 20];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut got, 0).unwrap();
    assert!(got[..1 << 20].iter().all(|b| *b == 0xab) && got[1 << 20..].iter().all(|b| *b == 0));
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut got, far - 1).unwrap();
    assert!(got[0] == 0 && got[1..=4096].iter().all(|b| *b == 0xcd) && got[4097..].iter().all(|b| *b == 0));
    std::fs::remove_file(&sparse).unwrap();
    ok(&shoal(&dir, &["rbd", "rm", "data/striped"]));
    ok(&shoal(&dir, &["rbd", "snap", "rm", "data/huge@s1"]));
    ok(&shoal(&dir, &["rbd", "rm", "data/huge"]));
    let left = ok(&shoal(&dir, &["obj", "ls", "-p", "data"]));
    assert!(left.lines().all(|l| !l.starts_with("rbd_data")), "{left}");
    // A flattened clone of a thin image stays thin: holes in the parent make no child objects.
    ok(&shoal(&dir, &["rbd", "import", &eight.display().to_string(), "data/thin"]));
    ok(&shoal(&dir, &["rbd", "resize", "data/thin", "--size", "64M"]));
    snapshot_clone_and_flatten(&dir, "data/thin@s", "data/kid");
    let du = json(&ok(&shoal(&dir, &["rbd", "du", "data/kid", "--json"])));
    assert_eq!((du["used_bytes"].as_u64(), du["objects"].as_u64()), (Some(8 << 20), Some(2)), "{du}");
    let kid = tmp.path().join("kid");
    ok(&shoal(&dir, &["rbd", "export", "data/kid", &kid.display().to_string()]));
    let mut want = bytes.clone();
    want.resize(64 << 20, 0);
    assert!(std::fs::read(&kid).unwrap() == want, "the flattened clone reads other bytes");
    // A 1 TiB clone is flattened by listing its parent's objects, not by reading 262,144 ranges.
    ok(&shoal(&dir, &["rbd", "resize", "data/thin", "--size", "1T"]));
    snapshot_clone_and_flatten(&dir, "data/thin@wide", "data/widekid");
    let info = json(&ok(&shoal(&dir, &["rbd", "info", "data/widekid", "--json"])));
    assert_eq!(info["parent"], serde_json::Value::Null, "{info}");
    let du = json(&ok(&shoal(&dir, &["rbd", "du", "data/widekid", "--json"])));
    assert_eq!((du["used_bytes"].as_u64(), du["objects"].as_u64()), (Some(8 << 20), Some(2)), "{du}");
}

/// Takes snapshot `snap` (`POOL/IMAGE@SNAP`), protects it, clones it as `child` and flattens
/// the clone.
fn snapshot_clone_and_flatten(dir: &Path, snap: &str, child: &str) {
    ok(&shoal(dir, &["rbd", "snap", "create", snap]));
    ok(&shoal(dir, &["rbd", "snap", "protect", snap]));
    ok(&shoal(dir, &["rbd", "clone", snap, child]));
    ok(&shoal(dir, &["rbd", "flatten", child]));
}

fn fio_verify(uri: &str, out: &Path, extra: &[&str]) {
    let uri = format!("--uri={uri}");
    let output = format!("--output={}", out.display());
    let common = ["--ioengine=nbd", "--rw=randwrite", "--bs=4k", "--iodepth=16", "--size=16M", "--offset=64M"];
    let verify = ["--verify=crc32c", "--randrepeat=1", uri.as_str(), output.as_str()];
    tool("fio", &[&common[..], &verify[..], extra].concat());
}

/// mkfs.ext4 on the export through nbdfuse and a loop device, files written and read back,
/// `e2fsck -fn` clean after unmount, and the files still there after a remount.
fn ext4_round_trip(tmp: &Path, uri: &str) {
    let fuse_dir = tmp.join("fuse");
    let mnt = tmp.join("mnt");
    std::fs::create_dir_all(&fuse_dir).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let disk = fuse_dir.join("disk");
    let mut fuse =
        Command::new("nbdfuse").arg(&disk).arg(uri).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !disk.exists() {
        assert!(std::time::Instant::now() < deadline, "nbdfuse did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let disk_s = disk.display().to_string();
    let loopdev = tool("losetup", &["-f", "--show", &disk_s]).trim().to_string();
    let mnt_s = mnt.display().to_string();
    let result = std::panic::catch_unwind(|| {
        tool("mkfs.ext4", &["-q", "-F", &loopdev]);
        tool("mount", &[&loopdev, &mnt_s]);
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        std::fs::write(mnt.join("a.bin"), &data).unwrap();
        std::fs::write(mnt.join("b.txt"), b"shoal over nbd\n").unwrap();
        tool("umount", &[&mnt_s]);
        tool("e2fsck", &["-fn", &loopdev]);
        tool("mount", &[&loopdev, &mnt_s]);
        assert!(std::fs::read(mnt.join("a.bin")).unwrap() == data, "a file read back other bytes after a remount");
        assert_eq!(std::fs::read(mnt.join("b.txt")).unwrap(), b"shoal over nbd\n");
        tool("umount", &[&mnt_s]);
    });
    let _ = Command::new("umount").arg(&mnt_s).output();
    let _ = Command::new("losetup").args(["-d", &loopdev]).output();
    unmount_fuse(&fuse_dir, &mut fuse);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// Unmounts nbdfuse's directory and waits for nbdfuse to end. Either FUSE's tool may be the one
/// installed (`fusermount3`, or `fusermount` without Debian's `fuse3`), and the loop device may
/// hold the file for a moment after `losetup -d`, so the unmount is retried; after 10 s nbdfuse
/// is killed, so that a failed unmount cannot hang the test (it once hung CI for 13 minutes).
fn unmount_fuse(dir: &Path, fuse: &mut std::process::Child) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        for tool in ["fusermount3", "fusermount"] {
            let _ = Command::new(tool).arg("-u").arg(dir).output();
        }
        if fuse.try_wait().ok().flatten().is_some() {
            return;
        }
        if std::time::Instant::now() > deadline {
            let _ = fuse.kill();
            let _ = fuse.wait();
            let _ = Command::new("umount").arg("-l").arg(dir).output();
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn tls_on_a_unix_socket_and_qemu_reconnecting_across_a_killed_server() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _down) = up_mem(tmp.path(), 1, "2G");
    ok(&shoal(&dir, &["rbd", "create", "data/vol", "--size", "128M"]));

    // TLS on a unix socket. Unusable identities stop the start, naming the file.
    let (cert, key) = common::tls_identity(tmp.path());
    let (c, k) = (cert.display().to_string(), key.display().to_string());
    let bad = shoal(&dir, &["nbd", "serve", "data/vol", "--listen", "127.0.0.1:0", "--tls-cert", &k, "--tls-key", &k]);
    fails_with(&bad, "holds no CERTIFICATE");
    fails_with(&shoal(&dir, &["nbd", "serve", "data/vol", "--tls-cert", &c]), "--tls-key");
    let socket = tmp.path().join("nbd.sock");
    let server = serve_socket(&dir, &socket, &["data/vol", "--tls-cert", &c, "--tls-key", &k]);
    let sock = socket.display().to_string();

    // A client that does not start TLS is refused before it learns anything.
    let clear = format!("nbd+unix:///data/vol?socket={sock}");
    assert!(tool_fails("nbdinfo", &["--size", &clear]).contains("requires TLS"));
    // (libnbd reports TLS_REQD to a listing as "not supported".)
    let listing = tool_fails("nbdinfo", &["--list", &clear]);
    assert!(listing.contains("replied with error to list request"), "{listing}");

    // Over TLS, with the server's certificate verified against it as the CA: size, a copy in
    // and out, patterned I/O through QEMU's own TLS client.
    let certs = tmp.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    std::fs::copy(&cert, certs.join("ca-cert.pem")).unwrap();
    let secure = format!("nbds+unix:///data/vol?socket={sock}&tls-certificates={}", certs.display());
    assert_eq!(tool("nbdinfo", &["--size", &secure]).trim(), (128u64 << 20).to_string());
    let input = tmp.path().join("in.raw");
    let pattern: Vec<u8> = (0..8u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    std::fs::write(&input, &pattern).unwrap();
    tool("nbdcopy", &[&input.display().to_string(), &secure]);
    let output = tmp.path().join("out.raw");
    tool("nbdcopy", &[&secure, &output.display().to_string()]);
    assert_eq!(&std::fs::read(&output).unwrap()[..8 << 20], &pattern[..], "bytes changed over TLS");
    let qemu =
        format!("driver=nbd,server.type=unix,server.path={sock},export=data/vol,tls-creds=tls0,tls-hostname=localhost");
    let creds = format!("tls-creds-x509,id=tls0,endpoint=client,dir={}", certs.display());
    tool(
        "qemu-io",
        &["--object", &creds, "--image-opts", &qemu, "-c", "write -P 0x3c 9M 1M", "-c", "read -P 0x3c 9M 1M"],
    );
    server.stop();
    assert!(!socket.exists(), "a stopped server leaves its socket behind");

    // In the clear on a unix socket, large read replies are spliced into the socket (decision
    // 0097): copies out read what was written, over what TLS wrote, and fio's reads of 512 KiB,
    // many in flight, verify what it wrote.
    let server = serve_socket(&dir, &socket, &["data/vol"]);
    let clear = format!("nbd+unix:///data/vol?socket={sock}");
    let pattern: Vec<u8> = pattern.iter().map(|b| b ^ 0x5A).collect();
    std::fs::write(&input, &pattern).unwrap();
    tool("nbdcopy", &[&input.display().to_string(), &clear]);
    for _ in 0..2 {
        tool("nbdcopy", &["--request-size=1048576", &clear, &output.display().to_string()]);
        assert_eq!(&std::fs::read(&output).unwrap()[..8 << 20], &pattern[..], "bytes changed over a unix socket");
    }
    let uri = format!("--uri={clear}");
    let verify_out = format!("--output={}", tmp.path().join("fio-unix.out").display());
    let args = ["--name=large", "--ioengine=nbd", "--rw=write", "--bs=512k", "--iodepth=8", "--size=32M"];
    tool("fio", &[&args[..], &["--offset=16M", "--verify=crc32c", &uri, &verify_out]].concat());
    server.stop();

    // QEMU with reconnect-delay carries on across a server killed with SIGKILL and started
    // again on the same address: its requests in flight are resent, none fails, and what it
    // wrote reads back.
    let port = free_port();
    let lease = ["--lock-lease-s", "2"];
    let mut first = serve_on(&dir, port, &[&["data/vol"][..], &lease].concat());
    let opts = format!(
        "driver=nbd,server.type=inet,server.host=127.0.0.1,server.port={port},export=data/vol,reconnect-delay=60"
    );
    let mut cmds = Vec::new();
    for i in 0..4u64 {
        cmds.extend(["-c".to_string(), format!("write -P {} {}M 32M", 0x70 + i, i * 32)]);
    }
    for i in 0..4u64 {
        cmds.extend(["-c".to_string(), format!("read -P {} {}M 32M", 0x70 + i, i * 32)]);
    }
    let mut qemu = Command::new("qemu-io")
        .args(["--image-opts", &opts])
        .args(&cmds)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        qemu.try_wait().unwrap().is_none(),
        "qemu-io finished before the server was killed: the test proves nothing"
    );
    first.0.kill().unwrap();
    let _ = first.0.wait();
    let _again = serve_on(&dir, port, &[&["data/vol"][..], &lease].concat());
    let out = qemu.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && !text.contains("Pattern verification failed"), "qemu-io: {text}");
    assert_eq!(text.matches("read 33554432/33554432").count(), 4, "qemu-io: {text}");
}

/// Whether `shoal status` of the cluster in `dir` reports a full OSD.
fn has_full_osd(dir: &Path) -> bool {
    let s = json(&ok(&shoal(dir, &["status", "--json"])));
    s["problems"].as_array().into_iter().flatten().any(|p| p.as_str().is_some_and(|p| p.contains("is full")))
}

/// Polls until `has_full_osd` is `full`, for at most 20 s (OSDs report once a second).
fn wait_full(dir: &Path, full: bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while has_full_osd(dir) != full {
        assert!(std::time::Instant::now() < deadline, "the full flag never became {full}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn a_full_cluster_answers_writes_with_enospc_and_still_takes_discards() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _down) = up_mem(tmp.path(), 1, "128M");
    // A thin image four times the cluster's size.
    ok(&shoal(&dir, &["rbd", "create", "data/big", "--size", "512M"]));
    // A short lease: the cluster stays full for longer than it, so the server must renew its
    // image lock while full (else it would fence itself and refuse even the discards).
    let (_server, port) = serve(&dir, &["data/big", "--lock-lease-s", "2"]);
    let uri = format!("nbd://127.0.0.1:{port}/data/big");

    // 4 MiB writes, each of its own pattern, paced so that the OSD's reports keep up, until one is
    // refused: by the monitors' full flag, or by the store if it filled before the next report.
    // Either way the block layer hears "no space left", never a failed device.
    let mut written = 0u64;
    let mut refusal = None;
    for i in 0..64u64 {
        let cmd = format!("write -P {} {}M 4M", i + 1, i * 4);
        let out = Command::new("qemu-io").args(["-f", "raw", "-c", &cmd, &uri]).output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if !out.status.success() || text.contains("failed") {
            refusal = Some(text);
            break;
        }
        written += 1;
        std::thread::sleep(std::time::Duration::from_millis(150));
    }
    let refusal = refusal.expect("a 128 MiB cluster took 256 MiB");
    assert!(refusal.contains("No space left on device"), "{refusal}");
    assert!(written >= 16, "only {written} writes of 4 MiB before the first refusal: {refusal}");
    wait_full(&dir, true);
    let out = tool_fails("qemu-io", &["-f", "raw", "-c", "write -P 9 400M 64K", &uri]);
    assert!(out.contains("No space left on device"), "a write into a full cluster: {out}");

    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(has_full_osd(&dir), "the cluster is still full after a lease");

    // Every acknowledged write reads back.
    let reads: Vec<String> = (0..written).map(|i| format!("read -P {} {}M 4M", i + 1, i * 4)).collect();
    qemu_io(&uri, &reads.iter().map(String::as_str).collect::<Vec<_>>());

    // Discards are taken while full: inside an object (punched: a small write made to free space,
    // decision 0045) and over whole objects (removed); what they cover reads as zeros, what they
    // do not keeps its bytes.
    qemu_io(&uri, &["discard 4608K 1M", "read -P 0 4608K 1M", "read -P 2 4M 512K", "read -P 2 5632K 2560K"]);
    qemu_io(&uri, &["discard 8M 32M", "read -P 0 8M 32M", "read -P 11 40M 4M"]);

    // The space came back: the flag clears and writes are taken again.
    wait_full(&dir, false);
    qemu_io(&uri, &["write -P 7 8M 4M", "read -P 7 8M 4M"]);
}

#[test]
fn a_failover_under_fio_verify_is_a_wait_not_an_io_error() {
    // Three `block` OSDs and a pool of three copies (min_size 2). fio writes an image at a
    // steady rate with crc32c verification while two of the three OSDs are killed with SIGKILL:
    // every PG falls below min_size and stops serving, and the writes must wait for the OSDs to
    // come back rather than fail (issue 10: a file system on the device must not go read-only
    // because of a failover). The server's lock lease (3 s) is shorter than the outage, so its
    // renewals fail for longer than a lease: the writes must still wait, not be refused, since
    // nobody took the lock meanwhile. Then every block fio wrote must verify.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let d = dir.display().to_string();
    ok(&shoal(tmp.path(), &["up", "--dir", &d, "--osds", "3", "--backend", "block", "--osd-size", "256M"]));
    let down = common::Down(dir.clone());
    ok(&shoal(&dir, &["pool", "create", "rep", "--size", "3", "--min-size", "2", "--pg-num", "16"]));
    ok(&shoal(&dir, &["rbd", "create", "rep/vol", "--size", "32M", "--object-size", "1M"]));
    let (_server, port) = serve(&dir, &["rep/vol", "--lock-lease-s", "3"]);
    let uri = format!("nbd://127.0.0.1:{port}/rep/vol");

    // About 12 s of writes at 400 IOPS, eight in flight, then fio's verification pass.
    let out = tmp.path().join("fio.json");
    let mut fio = Command::new("fio")
        .args(["--name=failover", "--ioengine=nbd", "--rw=randwrite", "--bs=4k", "--iodepth=8", "--size=18M"])
        .args(["--rate_iops=400", "--verify=crc32c", "--do_verify=1", "--randrepeat=1", "--output-format=json"])
        .arg(format!("--uri={uri}"))
        .arg(format!("--output={}", out.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fio");
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(fio.try_wait().unwrap().is_none(), "fio ended before the failover");
    common::sigkill(&dir, "osd.1");
    common::sigkill(&dir, "osd.2");
    // Longer than a client operation waits for the cluster (30 s) and than the lease: writes
    // and lock renewals fail, and the server must hold the writes rather than refuse them.
    std::thread::sleep(std::time::Duration::from_secs(36));
    assert!(fio.try_wait().unwrap().is_none(), "fio ended while the PGs could not serve (an I/O error?)");
    let restarted = [1, 2].map(|id| common::start_block_osd(&dir, id, "256M", &[]));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    let status = loop {
        if let Some(status) = fio.try_wait().unwrap() {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "fio did not finish within 180 s of the OSDs' restart");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let mut stderr = String::new();
    fio.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(status.success(), "fio failed across the failover: {stderr}");
    let report = json(&std::fs::read_to_string(&out).unwrap());
    assert_eq!(report["jobs"][0]["error"], 0, "{report}");
    assert!(report["jobs"][0]["write"]["total_ios"].as_u64().unwrap() >= 4608, "{report}");
    // The writes did wait: the server's lock went unrenewed for longer than a lease, which held
    // them (some may also have waited for the cluster inside the server, depending on when they
    // were sent), then was renewed again.
    let log = std::fs::read_to_string(dir.join(format!("nbd-{port}.log"))).unwrap();
    assert!(log.contains("not renewed within half its lease: writes wait"), "the lease never lapsed:\n{log}");
    assert!(log.contains("renewed again: writes go on"), "the lock was never renewed again:\n{log}");
    common::wait_clean(&dir, 3, std::time::Duration::from_secs(120));
    // The cluster stopped (`shoal down`), the restarted OSDs exit.
    drop(down);
    for mut osd in restarted {
        osd.wait().expect("a restarted OSD exits");
    }
}
