//! The event timeline (`qdnsctl events`, the status page): health transitions,
//! fail-open, reloads, shifts, overrides, checkers and edges coming and going — the last
//! [`MAX_EVENTS`], each also logged.
use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// Events kept in the timeline.
pub const MAX_EVENTS: usize = 1000;

/// One line of the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Unix seconds.
    pub time: u64,
    /// `health`, `fail-open`, `reload`, `shift`, `override`, `external`, `edge`,
    /// `checker`, `persist`, `latency`.
    pub kind: String,
    /// What happened.
    pub message: String,
}

/// The last [`MAX_EVENTS`] events, oldest first.
#[derive(Debug, Default)]
pub struct Timeline {
    events: VecDeque<Event>,
}

impl Timeline {
    /// Adds (and logs) an event at wall time `time`, dropping the oldest past the cap.
    pub fn push(&mut self, time: u64, kind: &str, message: String) {
        tracing::info!(kind, %message, "event");
        self.events.push_back(Event {
            time,
            kind: kind.to_owned(),
            message,
        });
        while self.events.len() > MAX_EVENTS {
            self.events.pop_front();
        }
    }

    /// The newest `n` events, oldest first.
    #[must_use]
    pub fn last(&self, n: usize) -> impl DoubleEndedIterator<Item = &Event> {
        self.events.iter().skip(self.events.len().saturating_sub(n))
    }

    /// None yet.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_events_in_order() {
        let mut timeline = Timeline::default();
        assert!(timeline.is_empty());
        for i in 0..MAX_EVENTS + 5 {
            timeline.push(i as u64, "health", format!("event {i}"));
        }
        let all: Vec<u64> = timeline.last(usize::MAX).map(|e| e.time).collect();
        assert_eq!(all.len(), MAX_EVENTS);
        assert_eq!((all[0], all[MAX_EVENTS - 1]), (5, (MAX_EVENTS + 4) as u64));
        let newest: Vec<u64> = timeline.last(2).rev().map(|e| e.time).collect();
        assert_eq!(newest, [(MAX_EVENTS + 4) as u64, (MAX_EVENTS + 3) as u64]);
    }
}
