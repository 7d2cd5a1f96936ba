//! Service replicas as real processes, for tests that kill them: `kill -9` (no drain, no
//! commit), SIGTERM (drain and leave), their `/metrics` and `/readyz`.

use std::process::{Child, Command};
use std::time::Duration;

use crate::{EmbeddedError, io};

/// A replica process; killed when dropped.
#[derive(Debug)]
pub struct Replica {
    child: Option<Child>,
    /// Port of its admin endpoint (`--metrics-listen 127.0.0.1:<port>`).
    pub metrics_port: u16,
    /// Name for messages.
    pub name: String,
}

impl Replica {
    /// Starts `cmd` (already given `--metrics-listen 127.0.0.1:<metrics_port>`).
    pub fn spawn(mut cmd: Command, name: &str, metrics_port: u16) -> Result<Self, EmbeddedError> {
        let child = cmd
            .spawn()
            .map_err(io(format!("starting replica {name}")))?;
        Ok(Replica {
            child: Some(child),
            metrics_port,
            name: name.to_owned(),
        })
    }

    /// Whether the process has exited on its own.
    pub fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_some())
    }

    /// SIGKILL and reap: no drain, no commit.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait; whether it exited 0.
    pub fn terminate(&mut self) -> bool {
        let Some(mut c) = self.child.take() else {
            return false;
        };
        let sent = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        sent && c.wait().is_ok_and(|s| s.success())
    }

    /// Its Prometheus text, waiting up to 10 s for the endpoint.
    pub async fn metrics(&self) -> Result<String, EmbeddedError> {
        let url = format!("http://127.0.0.1:{}/metrics", self.metrics_port);
        let mut last = String::new();
        for _ in 0..200 {
            match reqwest::get(&url).await {
                Ok(r) => match r.text().await {
                    Ok(text) => return Ok(text),
                    Err(e) => last = e.to_string(),
                },
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(EmbeddedError::Io {
            context: format!("{}: no metrics at {url}: {last}", self.name),
            source: std::io::Error::from(std::io::ErrorKind::TimedOut),
        })
    }

    /// Waits up to 15 s until `/readyz` answers 200.
    pub async fn wait_ready(&self) -> Result<(), EmbeddedError> {
        let url = format!("http://127.0.0.1:{}/readyz", self.metrics_port);
        for _ in 0..300 {
            if let Ok(r) = reqwest::get(&url).await
                && r.status() == 200
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(EmbeddedError::Io {
            context: format!("{} never became ready at {url}", self.name),
            source: std::io::Error::from(std::io::ErrorKind::TimedOut),
        })
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The last `lines` lines of every log file in `dir`, each under its path: what a failing
/// process test prints.
pub fn logs_tail(dir: &std::path::Path, lines: usize) -> String {
    let mut out = String::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(lines).collect();
            out.push_str(&format!("--- {} ---\n", e.path().display()));
            for l in tail.into_iter().rev() {
                out.push_str(l);
                out.push('\n');
            }
        }
    }
    out
}

/// The sum of the values of metric `name`'s lines whose labels contain all of `with`.
pub fn metric(text: &str, name: &str, with: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .filter(|l| with.iter().all(|w| l.contains(w)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_sums_matching_lines_of_that_name_only() {
        let text = "# HELP a x\na_total{g=\"1\",o=\"ok\"} 2\na_total{g=\"2\",o=\"ok\"} 3\na_total_other 9\na_total{g=\"1\",o=\"bad\"} 4\n";
        assert_eq!(metric(text, "a_total", &["o=\"ok\""]), 5.0);
        assert_eq!(metric(text, "a_total", &[]), 9.0);
        assert_eq!(metric(text, "missing", &[]), 0.0);
    }
}
