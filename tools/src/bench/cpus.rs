//! `--cpus` lists and thread pinning. The generator is meant to run on cores the server does
//! not use (platform notes §3: a pinned shard only gets a fair-share slice of its core when
//! load-generator threads land on it), so every thread of the run is pinned, the main thread
//! included.

use std::fmt;
use std::str::FromStr;

/// CPU numbers from `1`, `1,3`, `2-3` or `0,2-3`; kept in the order given, without duplicates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

impl FromStr for CpuList {
    type Err = String;

    fn from_str(s: &str) -> Result<CpuList, String> {
        let mut cpus = Vec::new();
        for part in s.split(',').map(str::trim) {
            let bad = || format!("bad CPU list {s:?}: expected e.g. 1 or 1,3 or 2-3");
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => (a.trim().parse(), b.trim().parse()),
                None => (part.parse(), part.parse()),
            };
            let (lo, hi): (usize, usize) = (lo.map_err(|_| bad())?, hi.map_err(|_| bad())?);
            // CPU_SETSIZE bounds what sched_setaffinity can express with a cpu_set_t.
            if lo > hi || hi >= libc::CPU_SETSIZE as usize {
                return Err(bad());
            }
            for c in lo..=hi {
                if !cpus.contains(&c) {
                    cpus.push(c);
                }
            }
        }
        Ok(CpuList(cpus))
    }
}

impl fmt::Display for CpuList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|c| c.to_string()).collect();
        f.write_str(&parts.join(","))
    }
}

/// Restricts the calling thread to `cpus` (threads it spawns afterwards inherit the mask).
pub fn pin_current_thread(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET only write inside it, and every cpu
    // number was bounded by CPU_SETSIZE when parsed. Pid 0 means the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_ranges() {
        assert_eq!("1".parse::<CpuList>().unwrap().0, vec![1]);
        assert_eq!("1,3".parse::<CpuList>().unwrap().0, vec![1, 3]);
        assert_eq!("0, 2-4,3".parse::<CpuList>().unwrap().0, vec![0, 2, 3, 4]);
        for bad in ["", "a", "3-1", "1,", "-1", "99999"] {
            assert!(bad.parse::<CpuList>().is_err(), "{bad:?}");
        }
        assert_eq!(CpuList(vec![1, 2]).to_string(), "1,2");
    }
}
