//! A daemon under test (`qdns-edge`, `qdns-control`, a checker, BIRD, an HTTP target):
//! a child process whose stderr lines are echoed (so a failing test shows what it
//! said) and collected for the test to wait on; killed by its PID on drop.
use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{mpsc, Mutex},
    time::{Duration, Instant},
};

/// A running child process and the log lines it wrote.
pub struct Daemon {
    /// The process (its PID is the daemon's, also under `ip netns exec`, which execs).
    pub child: Child,
    lines: Mutex<mpsc::Receiver<String>>,
    history: Mutex<Vec<String>>,
    name: &'static str,
}

impl Daemon {
    /// Spawns `command` (with `RUST_LOG=info`, stdout discarded) as `name`.
    pub fn spawn(name: &'static str, mut command: Command) -> Daemon {
        let mut child = command
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: cannot spawn {command:?}: {e}"));
        let stderr = child.stderr.take().expect("stderr is piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let line = line.unwrap_or_else(|e| format!("(stderr unreadable: {e})"));
                eprintln!("[{name}] {line}");
                let _ = tx.send(line);
            }
        });
        Daemon {
            child,
            lines: Mutex::new(rx),
            history: Mutex::new(Vec::new()),
            name,
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (up to 20 s) for a new log line containing `needle`; returns it.
    pub fn wait_for(&self, needle: &str) -> String {
        self.wait_for_within(needle, Duration::from_secs(20))
    }

    /// Waits up to `limit` for a new log line containing `needle`; returns it.
    pub fn wait_for_within(&self, needle: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        let rx = self.lines.lock().unwrap();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    self.history.lock().unwrap().push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(e) => panic!("{}: no log line with {needle:?} within {limit:?} ({e})", self.name),
            }
        }
    }

    /// Waits up to `limit` until a log line containing each of `needles` came, in any
    /// order.
    pub fn wait_for_all(&self, needles: &[&str], limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut missing: Vec<&str> = needles.to_vec();
        let rx = self.lines.lock().unwrap();
        while !missing.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    missing.retain(|n| !line.contains(n));
                    self.history.lock().unwrap().push(line);
                }
                Err(e) => panic!("{}: no log lines with {missing:?} within {limit:?} ({e})", self.name),
            }
        }
    }

    /// Moves what arrived into the history.
    fn drain(&self) {
        let rx = self.lines.lock().unwrap();
        let mut history = self.history.lock().unwrap();
        while let Ok(line) = rx.try_recv() {
            history.push(line);
        }
    }

    /// A line containing `needle` logged at any time so far (waiting up to 5 s).
    pub fn seen(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            self.drain();
            if let Some(line) = self.history.lock().unwrap().iter().find(|l| l.contains(needle)) {
                return line.clone();
            }
            assert!(Instant::now() < deadline, "{}: never logged {needle:?}", self.name);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// How many lines logged so far contain `needle` (no waiting).
    pub fn count(&self, needle: &str) -> usize {
        self.drain();
        self.history
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// Whether any line logged so far contains `needle` (no waiting).
    pub fn history_has(&self, needle: &str) -> bool {
        self.drain();
        self.history.lock().unwrap().iter().any(|l| l.contains(needle))
    }

    /// Sends `signal` (`TERM`, `HUP`, `USR2`…) to it.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args(["-s", signal, &self.pid().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "{}: kill -s {signal} failed", self.name);
    }

    /// Waits up to `limit` for it to exit on its own; its status.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "{} did not exit within {limit:?}", self.name);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then waits (up to 10 s) for it to exit; its status.
    pub fn term(&mut self) -> ExitStatus {
        self.signal("TERM");
        self.wait_exit(Duration::from_secs(10))
    }

    /// SIGTERM; its status and the lines it wrote that no wait consumed.
    pub fn stop_with_log(&mut self) -> (ExitStatus, Vec<String>) {
        let status = self.term();
        let rx = self.lines.lock().unwrap();
        let mut lines = Vec::new();
        // The reader thread ends at EOF, which disconnects the channel.
        while let Ok(line) = rx.recv_timeout(Duration::from_secs(5)) {
            lines.push(line);
        }
        (status, lines)
    }

    /// SIGKILL, and reaps it.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
    }
}
