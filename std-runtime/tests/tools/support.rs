//! The fixture every tools test uses: a registry over a temp working
//! directory and a temp `$HERMES_HOME`, called the way the agent loop calls it.

use hermes_core::{InterruptFlag, IterationBudget, ToolContext, ToolError, ToolRegistry};
use hermes_runtime::tools::{ToolEnv, build_registry};
use serde_json::Value;
use tempfile::TempDir;

pub(crate) struct Fx {
    pub(crate) work: TempDir,
    pub(crate) home: TempDir,
    pub(crate) reg: ToolRegistry,
    pub(crate) budget: IterationBudget,
    pub(crate) interrupt: InterruptFlag,
}

impl Fx {
    pub(crate) fn with(configure: impl FnOnce(&mut ToolEnv), toolsets: Option<&[&str]>) -> Fx {
        let work = TempDir::new().unwrap();
        let home = TempDir::new().unwrap();
        let mut env = ToolEnv::new(work.path(), home.path());
        configure(&mut env);
        let sets: Option<Vec<String>> = toolsets.map(|s| s.iter().map(|x| x.to_string()).collect());
        let reg = build_registry(&env, sets.as_deref()).unwrap();
        Fx {
            work,
            home,
            reg,
            budget: IterationBudget::new(90),
            interrupt: InterruptFlag::new(),
        }
    }

    pub(crate) fn new() -> Fx {
        Fx::with(|_| {}, None)
    }

    pub(crate) fn call(&self, name: &str, args: Value) -> Result<String, ToolError> {
        let ctx = ToolContext {
            budget: &self.budget,
            interrupt: &self.interrupt,
            tool_call_id: "call_1",
        };
        self.reg.dispatch(name, &args.to_string(), &ctx)
    }

    pub(crate) fn ok(&self, name: &str, args: Value) -> String {
        match self.call(name, args) {
            Ok(s) => s,
            Err(e) => panic!("{name} failed: {e}"),
        }
    }

    pub(crate) fn err(&self, name: &str, args: Value) -> String {
        match self.call(name, args) {
            Ok(s) => panic!("{name} unexpectedly succeeded: {s}"),
            Err(ToolError::Failed(m)) => m,
            Err(ToolError::Abort(m)) => panic!("{name} aborted: {m}"),
        }
    }

    pub(crate) fn path(&self, rel: &str) -> std::path::PathBuf {
        self.work.path().join(rel)
    }

    pub(crate) fn write(&self, rel: &str, content: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
}
