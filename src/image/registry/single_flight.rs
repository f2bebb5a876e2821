//! One run per key at a time: a caller asking for what is already under way waits for that
//! run's result instead of starting its own. The work runs as its own task, so a caller that
//! gives up (a cancelled CRI request) does not cancel it for the others.

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

type Flight<T> = Shared<BoxFuture<'static, Result<T, String>>>;

pub struct SingleFlight<T: Clone> {
    flights: Arc<Mutex<HashMap<String, Flight<T>>>>,
}

impl<T: Clone> Default for SingleFlight<T> {
    fn default() -> Self {
        SingleFlight {
            flights: Arc::default(),
        }
    }
}

impl<T: Clone + Send + Sync + 'static> SingleFlight<T> {
    /// The result of `work` for `key`, or of the run for `key` already under way (then `work`
    /// is dropped unstarted). `Err` only when the run's task panicked.
    pub async fn run<F>(&self, key: &str, work: F) -> Result<T, String>
    where
        F: Future<Output = T> + Send + 'static,
    {
        let flight = {
            let mut flights = lock(&self.flights);
            match flights.get(key) {
                Some(flight) => {
                    tracing::debug!(key, "joining a pull already under way");
                    flight.clone()
                }
                None => {
                    let (flights_ref, owned_key) = (self.flights.clone(), key.to_string());
                    // The task removes its entry when done, before its waiters wake: a later
                    // call starts afresh.
                    let task = tokio::spawn(async move {
                        let out = work.await;
                        lock(&flights_ref).remove(&owned_key);
                        out
                    });
                    let flight = async move { task.await.map_err(|e| e.to_string()) }
                        .boxed()
                        .shared();
                    flights.insert(key.to_string(), flight.clone());
                    flight
                }
            }
        };
        flight.await
    }

    /// Runs under way (for tests and diagnostics).
    pub fn in_flight(&self) -> usize {
        lock(&self.flights).len()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn concurrent_callers_share_one_run() {
        let flights: Arc<SingleFlight<usize>> = Arc::default();
        let runs = Arc::new(AtomicUsize::new(0));
        let (release, released) = tokio::sync::watch::channel(false);
        let call = |key: &'static str| {
            let (flights, runs, mut released) = (flights.clone(), runs.clone(), released.clone());
            async move {
                flights
                    .run(key, async move {
                        let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                        let _ = released.wait_for(|r| *r).await;
                        n
                    })
                    .await
            }
        };
        let a = tokio::spawn(call("img"));
        let b = tokio::spawn(call("img"));
        let other = tokio::spawn(call("other"));
        while flights.in_flight() < 2 {
            tokio::task::yield_now().await;
        }
        // Both "img" callers are registered once the second has polled: give it the chance.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        release.send(true).unwrap();
        let (a, b, other) = (a.await.unwrap(), b.await.unwrap(), other.await.unwrap());
        assert_eq!(a, b, "the second caller got the first one's result");
        assert_ne!(a, other);
        assert_eq!(runs.load(Ordering::SeqCst), 2, "one run per key");
        assert_eq!(flights.in_flight(), 0);
        // Finished runs are not cached: the next call runs again.
        assert_eq!(call("img").await.unwrap(), 3);
    }
}
