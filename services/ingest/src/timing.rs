//! `Server-Timing` (W3C) on upload answers: how long each step of `POST /v1/documents`
//! took, so a client, a browser's developer tools or the ingest benchmark sees where a
//! request's time goes (`receive;dur=1.84, sync;dur=0.91, ...`, milliseconds). A step made
//! of things done at once also lists how long each of them took, as `step.part` before the
//! step; the steps alone add up to the request.

use std::fmt::Write as _;
use std::time::Instant;

use axum::http::HeaderValue;
use axum::response::Response;

/// The steps of one request, timed one after the other.
#[derive(Debug)]
pub(crate) struct Timing {
    last: Instant,
    steps: Vec<(&'static str, f64)>,
}

impl Timing {
    pub(crate) fn start() -> Self {
        Timing {
            last: Instant::now(),
            steps: Vec::with_capacity(10),
        }
    }

    /// Ends the step `name` (it began where the previous one ended).
    pub(crate) fn mark(&mut self, name: &'static str) {
        let now = Instant::now();
        self.steps
            .push((name, now.duration_since(self.last).as_secs_f64() * 1e3));
        self.last = now;
    }

    /// Records `step.part`: one of the things done at once in the step now running, which
    /// took `ms` (see [`timed`]).
    pub(crate) fn part(&mut self, name: &'static str, ms: f64) {
        self.steps.push((name, ms));
    }

    /// The header value: `name;dur=ms` for each step, in order.
    pub(crate) fn header(&self) -> String {
        let mut out = String::new();
        for (i, (name, ms)) in self.steps.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            let _ = write!(out, "{name};dur={ms:.2}");
        }
        out
    }

    /// Adds the `Server-Timing` header to `resp`.
    pub(crate) fn attach(&self, mut resp: Response) -> Response {
        if let Ok(v) = HeaderValue::from_str(&self.header()) {
            resp.headers_mut().insert("server-timing", v);
        }
        resp
    }
}

/// Runs `f`, with how long it took in milliseconds (a part of a step, see
/// [`Timing::part`]).
pub(crate) async fn timed<T>(f: impl std::future::Future<Output = T>) -> (T, f64) {
    let start = Instant::now();
    let out = f.await;
    (out, start.elapsed().as_secs_f64() * 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_listed_in_order_with_durations() {
        let mut t = Timing::start();
        t.mark("receive");
        let spin = Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(2) {
            std::hint::spin_loop();
        }
        t.mark("produce");
        let h = t.header();
        let parts: Vec<&str> = h.split(", ").collect();
        assert_eq!(parts.len(), 2);
        assert!(parts[0].starts_with("receive;dur="));
        let produce: f64 = parts[1]
            .strip_prefix("produce;dur=")
            .unwrap()
            .parse()
            .unwrap();
        assert!(produce >= 2.0, "{h}");
    }
}
