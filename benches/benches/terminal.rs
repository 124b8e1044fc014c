//! Per-command cost of the terminal tool: `true` through the registry, the
//! way the agent loop calls it, with the sandbox on (Landlock ruleset, a
//! private temp dir) and off (opted out). Both run in a PID namespace; the
//! difference is the sandbox's own cost.

use criterion::{Criterion, criterion_group, criterion_main};
use hermes_core::{InterruptFlag, IterationBudget, ToolContext};
use hermes_runtime::tools::{SandboxMode, ToolEnv, build_registry};

fn terminal(c: &mut Criterion) {
    let work = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let home = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let budget = IterationBudget::new(u32::MAX);
    let interrupt = InterruptFlag::new();
    let ctx = ToolContext {
        budget: &budget,
        interrupt: &interrupt,
        tool_call_id: "bench",
    };
    for (name, mode) in [
        ("terminal_true_sandbox_on", SandboxMode::On),
        ("terminal_true_sandbox_off", SandboxMode::Off),
    ] {
        let mut env = ToolEnv::new(work.path(), home.path());
        env.sandbox = mode;
        let reg = build_registry(&env, Some(&["terminal".to_owned()]))
            .unwrap_or_else(|e| panic!("registry: {e}"));
        c.bench_function(name, |b| {
            b.iter(|| {
                reg.dispatch("terminal", r#"{"command":"true"}"#, &ctx)
                    .unwrap_or_else(|e| panic!("terminal: {e}"))
            })
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30);
    targets = terminal
}
criterion_main!(benches);
