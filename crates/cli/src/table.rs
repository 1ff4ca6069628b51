//! The readable table of `shoal store bench`.

use std::fmt::Write;

use shoal_store::bench::{BenchReport, human};

fn find<'a>(
    r: &'a BenchReport,
    backend: &str,
    mode: &str,
    op: &str,
    bs: u64,
) -> Option<&'a shoal_store::bench::CellResult> {
    r.results.iter().find(|c| c.backend == backend && c.mode == mode && c.op == op && c.block_size == bs)
}

fn raw(r: &BenchReport, mode: &str, op: &str, bs: u64) -> Option<f64> {
    r.raw.iter().find(|c| c.mode == mode && c.op == op && c.block_size == bs).map(|c| c.mb_per_s)
}

/// Renders throughput per backend next to the raw device, with the ratios that matter.
pub fn render(r: &BenchReport) -> String {
    let mut s = String::new();
    let backends: Vec<&str> = r.config.backends.iter().map(|b| b.name()).collect();
    let _ = writeln!(s, "machine: {} ({} cpus), kernel {}", r.machine.cpu, r.machine.cpus, r.machine.kernel);
    for op in shoal_store::bench::OPS {
        let writes = op == "write" || op == "overwrite";
        let _ = writeln!(s, "\n{op} MB/s{}", if writes { "  (device bytes per user byte)" } else { "" });
        let mut header = format!("{:<7} {:>8} {:>9}", "mode", "size", "raw");
        for b in &backends {
            let _ = write!(header, " {b:>16}");
        }
        let _ = write!(header, " {:>10} {:>12}", "block/raw", "block/posix");
        let _ = writeln!(s, "{header}");
        let modes: Vec<&str> = r.config.modes.iter().map(|m| m.name()).collect();
        for mode in &modes {
            for &bs in &r.config.block_sizes {
                let raw_mbps = raw(r, mode, op, bs);
                let mut line =
                    format!("{mode:<7} {:>8} {:>9}", human(bs), raw_mbps.map_or("-".into(), |v| format!("{v:.1}")));
                for b in &backends {
                    let cell = find(r, b, mode, op, bs);
                    let text = match cell {
                        Some(c) if writes => format!("{:.1} ({:.2})", c.mb_per_s, c.device_bytes_per_user_byte),
                        Some(c) => format!("{:.1}", c.mb_per_s),
                        None => "-".into(),
                    };
                    let _ = write!(line, " {text:>16}");
                }
                let pair = r.paired.iter().find(|p| p.mode == *mode && p.op == op && p.block_size == bs);
                let show = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
                let _ = write!(
                    line,
                    " {:>10} {:>12}",
                    show(pair.and_then(|p| p.block_vs_raw)),
                    show(pair.and_then(|p| p.block_vs_posix))
                );
                let _ = writeln!(s, "{line}");
            }
        }
    }
    let _ = writeln!(s, "\nblock/raw and block/posix: median over rounds of ratios measured back to back.");
    let _ = writeln!(s, "\npeak resident memory per phase:");
    for m in &r.memory {
        let _ = writeln!(s, "  {:<6} {:.1} MiB", m.backend, m.peak_rss_bytes as f64 / (1 << 20) as f64);
    }
    s
}
