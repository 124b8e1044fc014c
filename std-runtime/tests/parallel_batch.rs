//! The std runtime's batch runner (SPEC Y6): read-only calls of one turn
//! run at the same time, results in call order, interrupts respected.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hermes_core::*;
use hermes_runtime::parallel::ParallelBatch;
use serde_json::json;

/// A read-only tool that waits until `want` calls run at once (or 5 s
/// pass) and records the most it saw.
struct Rendezvous {
    spec: ToolSpec,
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    want: usize,
    patience: Duration,
}

impl Tool for Rendezvous {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        let deadline = Instant::now() + self.patience;
        while self.most.load(Ordering::SeqCst) < self.want && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        Ok(format!("read {arguments}"))
    }
    fn read_only(&self) -> bool {
        true
    }
}

fn rendezvous(want: usize) -> (Rendezvous, Arc<AtomicUsize>) {
    let most = Arc::new(AtomicUsize::new(0));
    let tool = Rendezvous {
        spec: ToolSpec::new("read", "reads", json!({"type": "object"})),
        running: Arc::new(AtomicUsize::new(0)),
        most: most.clone(),
        want,
        patience: Duration::from_secs(5),
    };
    (tool, most)
}

fn calls(n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| (format!("id{i}"), format!(r#"{{"i":{i}}}"#)))
        .collect()
}

fn run(
    runner: &ParallelBatch,
    tools: &ToolRegistry,
    calls: &[(String, String)],
    flag: &InterruptFlag,
) -> Vec<BatchResult> {
    let batch: Vec<BatchCall<'_>> = calls
        .iter()
        .map(|(id, args)| BatchCall {
            name: "read",
            arguments: args,
            tool_call_id: id,
        })
        .collect();
    runner.run_batch(tools, &batch, &IterationBudget::new(10), flag)
}

#[test]
fn three_read_only_calls_run_at_once_and_come_back_in_order() {
    let (tool, most) = rendezvous(3);
    let tools = ToolRegistry::new().with(tool);
    let calls = calls(3);
    let results = run(
        &ParallelBatch::default(),
        &tools,
        &calls,
        &InterruptFlag::new(),
    );
    assert_eq!(most.load(Ordering::SeqCst), 3);
    let texts: Vec<_> = results.into_iter().map(|r| r.unwrap().unwrap()).collect();
    assert_eq!(
        texts,
        [r#"read {"i":0}"#, r#"read {"i":1}"#, r#"read {"i":2}"#]
    );
}

#[test]
fn no_more_than_the_limit_run_at_once() {
    // Wanting 4 at once while the limit is 2: each call gives up after its
    // wait, and never more than 2 ran together.
    let (mut tool, most) = rendezvous(4);
    tool.want = 3;
    tool.patience = Duration::from_millis(200);
    let tools = ToolRegistry::new().with(tool);
    let calls = calls(4);
    let results = run(
        &ParallelBatch::with_limit(2),
        &tools,
        &calls[..],
        &InterruptFlag::new(),
    );
    assert_eq!(results.len(), 4);
    assert!(results.iter().all(|r| matches!(r, Some(Ok(_)))));
    assert_eq!(most.load(Ordering::SeqCst), 2);
}

/// Sets the interrupt flag; the others wait for it, so nothing else can
/// start before it is set.
struct Stopper {
    spec: ToolSpec,
    flag: InterruptFlag,
    ran: Arc<Mutex<Vec<String>>>,
}

impl Tool for Stopper {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        self.ran.lock().unwrap().push(arguments.to_owned());
        if arguments.contains("\"i\":0") {
            self.flag.interrupt();
        } else {
            let deadline = Instant::now() + Duration::from_secs(5);
            while !self.flag.is_set() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        Ok("done".into())
    }
    fn read_only(&self) -> bool {
        true
    }
}

#[test]
fn after_an_interrupt_no_new_call_starts() {
    let flag = InterruptFlag::new();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let tools = ToolRegistry::new().with(Stopper {
        spec: ToolSpec::new("read", "reads", json!({"type": "object"})),
        flag: flag.clone(),
        ran: ran.clone(),
    });
    let calls = calls(5);
    let results = run(&ParallelBatch::with_limit(2), &tools, &calls, &flag);
    assert!(matches!(results[0], Some(Ok(_))));
    // At most the second worker's first call ran besides the stopper.
    assert!(results[2..].iter().all(Option::is_none), "{results:?}");
    assert!(ran.lock().unwrap().len() <= 2);
}
