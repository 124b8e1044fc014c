//! A halted wallet (spending caps, issue 44): the call under way finishes,
//! its tools are answered, and no further call is made.

use super::*;

/// Halts the wallet at the second model call, as the gateway does when a
/// spending cap was reached by the first.
struct HaltAtSecondCall(IterationBudget);
impl AgentObserver for HaltAtSecondCall {
    fn on_event(&mut self, e: &AgentEvent<'_>) {
        if matches!(e, AgentEvent::ModelCall { iteration: 2, .. }) {
            self.0.halt();
        }
    }
}

#[test]
fn a_halted_wallet_finishes_the_current_call_and_makes_no_other() {
    let model = ScriptedModel::new(vec![
        Step::Reply {
            pieces: vec!["Looking it up."],
            calls: vec![call("c1", "a", "{}")],
            finish: Some(FinishReason::ToolCalls),
        },
        text("never"),
    ]);
    let a = echo("a");
    let count = a.calls.clone();
    let ag = agent(model.clone(), ToolRegistry::new().with(a));
    let budget = IterationBudget::default();
    let out = ag.run("go", vec![], &budget, &mut HaltAtSecondCall(budget.clone()));
    assert_eq!(
        model.calls(),
        1,
        "no call after the halt, not even the reserved answer"
    );
    assert_eq!(
        count.load(Ordering::SeqCst),
        1,
        "the call's tool is answered"
    );
    assert_eq!(out.final_text, "Looking it up.");
    assert!(out.stop.notice(90).is_some());
    check(
        &out,
        expect![[r#"
            stop: Halted, iterations: 2
            user: "go"
            assistant: "Looking it up." [c1 a({})] (tool_calls)
            tool: "a got {}" <- c1
        "#]],
    );
}
