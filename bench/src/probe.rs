//! CPU time and resident memory of a process (and of a process tree), read
//! from `/proc`; the CPU time of the calling thread and of this process; and a sampler that keeps the peaks while a benchmark runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Resident set size in bytes (`VmRSS`), or `None` if the process is gone.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// User + system CPU time the process has used.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_cpu_time(&stat).map(|(_, time)| time)
}

/// User + system CPU time of the process's threads whose name (`comm`,
/// at most 15 bytes) starts with `prefix`, those alive now.
pub fn threads_cpu_time(pid: u32, prefix: &str) -> Duration {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Duration::ZERO;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("stat")).ok())
        .filter_map(|stat| {
            let (name, time) = stat_cpu_time(&stat)?;
            name.starts_with(prefix).then_some(time)
        })
        .sum()
}

/// The name and the user + system CPU time of a `/proc/…/stat` line.
fn stat_cpu_time(stat: &str) -> Option<(&str, Duration)> {
    // The command name may hold spaces; fields resume after its ')'.
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let rest = stat.get(close + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line (1-based),
    // i.e. 11 and 12 after the state field.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let hz = match unsafe { libc::sysconf(libc::_SC_CLK_TCK) } {
        n if n > 0 => n as u64,
        _ => 100,
    };
    Some((
        &stat[open + 1..close],
        Duration::from_millis(ticks * 1000 / hz),
    ))
}

/// CPU time a process and its descendants alive now have used, to the
/// nanosecond (`/proc/<pid>/schedstat` of each one's main thread).
pub fn tree_cpu_time(pid: u32) -> Duration {
    let own = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_nanos);
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    own + children
        .split_whitespace()
        .filter_map(|c| c.parse::<u32>().ok())
        .map(tree_cpu_time)
        .sum::<Duration>()
}

/// CPU time this whole process (every thread) has used.
pub fn process_cpu_time() -> Duration {
    // SAFETY: getrusage writes only the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(micros(usage.ru_utime) + micros(usage.ru_stime))
}

/// CPU time the calling thread has used.
pub fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only the timespec it is given.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } == 0;
    if !ok {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// The processes whose command name (`/proc/<pid>/comm`) is `name`.
pub fn named(name: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == name)
        })
        .collect()
}

/// The processes whose parent is `pid`.
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|stat| {
                    let rest = &stat[stat.rfind(')')? + 2..];
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// Peaks seen by a [`Sampler`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Peaks {
    pub rss: u64,
    /// Highest CPU use over one sampling window, in cores (1.0 = one core).
    pub cpu: f64,
}

/// Samples a process every `period` until dropped or stopped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    peaks: Arc<Mutex<Peaks>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    pub fn start(pid: u32, period: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peaks = Arc::new(Mutex::new(Peaks::default()));
        let thread = {
            let (stop, peaks) = (stop.clone(), peaks.clone());
            std::thread::spawn(move || {
                let mut last = (Instant::now(), cpu_time(pid).unwrap_or_default());
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(period);
                    let (Some(rss), Some(cpu)) = (rss_bytes(pid), cpu_time(pid)) else {
                        continue;
                    };
                    let now = Instant::now();
                    let used = cpu.saturating_sub(last.1).as_secs_f64()
                        / now.duration_since(last.0).as_secs_f64();
                    last = (now, cpu);
                    let mut p = peaks.lock().unwrap();
                    p.rss = p.rss.max(rss);
                    p.cpu = p.cpu.max(used);
                }
            })
        };
        Self {
            stop,
            peaks,
            thread: Some(thread),
        }
    }

    /// Stops sampling and returns the peaks.
    pub fn finish(mut self) -> Peaks {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        *self.peaks.lock().unwrap()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let pid = std::process::id();
        assert!(rss_bytes(pid).unwrap() > 1 << 20);
        let before = cpu_time(pid).unwrap();
        let until = Instant::now() + Duration::from_millis(60);
        let mut x = 0u64;
        while Instant::now() < until {
            x = x.wrapping_add(1);
        }
        assert!(x > 0);
        assert!(cpu_time(pid).unwrap() > before);
    }

    #[test]
    fn reads_the_threads_of_a_name() {
        let pid = std::process::id();
        let (spun, measured) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let spinner = std::thread::Builder::new()
            .name("probe-spinner".into())
            .spawn(move || {
                let start = thread_cpu_time();
                while thread_cpu_time() < start + Duration::from_millis(60) {}
                spun.0.send(()).unwrap();
                // Alive until measured: a finished thread's time is gone.
                let _ = measured.1.recv();
            })
            .unwrap();
        spun.1.recv().unwrap();
        assert!(threads_cpu_time(pid, "probe-spin") >= Duration::from_millis(50));
        assert_eq!(threads_cpu_time(pid, "no-such-thread"), Duration::ZERO);
        measured.0.send(()).unwrap();
        spinner.join().unwrap();
    }
}
