//! Resident memory of a process, from `/proc`, for the bench and the soak
//! (both examples include this file by path).

use std::time::{Duration, Instant};

/// VmRSS of `pid` in bytes (0 if gone).
pub fn rss_bytes(pid: u32) -> u64 {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return 0;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// The process's RSS once it stops moving: two readings `interval` apart
/// within 0.5% of each other (giving up after `limit`), so buffers being
/// freed are not counted. Blocks the calling thread.
pub fn settled_rss(pid: u32, interval: Duration, limit: Duration) -> u64 {
    let deadline = Instant::now() + limit;
    let mut last = rss_bytes(pid);
    loop {
        std::thread::sleep(interval);
        let now = rss_bytes(pid);
        if now.abs_diff(last) * 200 <= last.max(1) || Instant::now() >= deadline {
            return now;
        }
        last = now;
    }
}
