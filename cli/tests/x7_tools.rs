//! The tools users reach for (SPEC X7) as a user meets them in the real
//! `hermes` binary, with a scripted loopback provider: approval of
//! dangerous commands on a terminal (a PTY) and without one, MCP servers
//! from npm in a full agent run, `hermes mcp list`, and MCP servers that die
//! with hermes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use hermes_tests::{FakeProvider, Reply};
use rexpect::session::spawn_command;
use serde_json::Value;

const HERMES: &str = env!("CARGO_BIN_EXE_hermes");

struct Env {
    home: tempfile::TempDir,
    work: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        Env {
            home: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
        }
    }

    fn config(&self, toml: &str) {
        std::fs::write(self.home.path().join("config.toml"), toml).unwrap();
    }

    fn cmd(&self, base_url: &str) -> Command {
        let mut c = Command::new(HERMES);
        c.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("HERMES_HOME", self.home.path())
            .env("HERMES_BASE_URL", base_url)
            .env("HERMES_MODEL", "fake-model")
            .env("HERMES_API_KEY", "sk-provider-key-never-for-mcp")
            .current_dir(self.work.path());
        c
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The tool results hermes sent back to the provider, in order.
fn tool_results(requests: &[Value]) -> Vec<String> {
    let Some(last) = requests.last() else {
        return Vec::new();
    };
    last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn everything_script() -> PathBuf {
    hermes_tests::tier::expect(hermes_tests::tier::Component::Npm("mcp"));
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(
        "../tests/emulators/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    assert!(
        path.is_file(),
        "the MCP test servers are not installed: run `npm ci --prefix tests/emulators/mcp` from \
         the repository root"
    );
    path
}

fn everything_config() -> String {
    format!(
        "[mcp.servers.everything]\ncommand = \"node\"\nargs = [\"{}\", \"stdio\"]\n",
        everything_script().display()
    )
}

mod approval {
    use super::*;

    #[test]
    fn the_user_is_asked_on_the_terminal_no_yes_and_always() {
        let env = Env::new();
        for d in ["junk", "a", "b"] {
            std::fs::create_dir_all(env.work.path().join(d).join("inner")).unwrap();
        }
        let provider = FakeProvider::start(vec![
            Reply::tool("c1", "terminal", r#"{"command":"rm -rf junk"}"#),
            Reply::text("Left it alone."),
            Reply::tool("c2", "terminal", r#"{"command":"rm -rf junk"}"#),
            Reply::text("Junk is gone."),
            Reply::tool("c3", "terminal", r#"{"command":"rm -r a"}"#),
            Reply::tool("c4", "terminal", r#"{"command":"rm -rf b && echo done-b"}"#),
            Reply::text("Both gone."),
        ])
        .unwrap();
        let mut cmd = env.cmd(&provider.base_url());
        cmd.env("TERM", "dumb").arg("chat");
        let mut p = spawn_command(cmd, Some(60_000)).unwrap();
        p.exp_string("/help lists commands").unwrap();

        p.send_line("clean up").unwrap();
        p.exp_string("needs your approval (recursive delete")
            .unwrap();
        p.exp_string("rm -rf junk").unwrap();
        p.exp_string("Run it? [y]es / [n]o / [a]lways for this session:")
            .unwrap();
        p.send_line("n").unwrap();
        p.exp_string("Left it alone.").unwrap();
        assert!(env.work.path().join("junk").is_dir(), "denied: not run");

        p.send_line("please, really").unwrap();
        p.exp_string("Run it? [y]es").unwrap();
        p.send_line("y").unwrap();
        p.exp_string("Junk is gone.").unwrap();
        assert!(!env.work.path().join("junk").exists());

        p.send_line("and a and b").unwrap();
        p.exp_string("Run it? [y]es").unwrap();
        p.send_line("a").unwrap();
        // The second recursive delete runs unasked: were it asked, the
        // prompt would wait and this expectation time out.
        p.exp_string("Both gone.").unwrap();
        assert!(!env.work.path().join("a").exists() && !env.work.path().join("b").exists());
        p.send_line("/exit").unwrap();
        p.exp_eof().unwrap();

        let requests = provider.requests();
        let results = tool_results(&requests);
        assert_eq!(results.len(), 4, "{results:?}");
        assert!(
            results[0].contains("did not approve") && results[0].contains("NOT run"),
            "{}",
            results[0]
        );
        assert!(results[0].contains("the user said no"), "{}", results[0]);
        assert!(results[1].contains("[exit code: 0]"), "{}", results[1]);
        assert!(results[3].contains("done-b"), "{}", results[3]);
        assert!(
            provider.violations().is_empty(),
            "{:?}",
            provider.violations()
        );
    }

    /// On a terminal rustyline does not drive (`TERM=dumb`, Emacs'
    /// `M-x shell`) Ctrl-C at the prompt is SIGINT. The prompt used to go on
    /// waiting for a line, so the turn hung; now it refuses and interrupts.
    #[test]
    fn ctrl_c_at_the_prompt_of_a_dumb_terminal_refuses_and_interrupts() {
        let env = Env::new();
        std::fs::create_dir_all(env.work.path().join("junk/inner")).unwrap();
        let provider = FakeProvider::start(vec![
            Reply::tool("c1", "terminal", r#"{"command":"rm -rf junk"}"#),
            Reply::text("this answer must not be asked for"),
        ])
        .unwrap();
        let mut cmd = env.cmd(&provider.base_url());
        cmd.env("TERM", "dumb").arg("chat");
        let mut p = spawn_command(cmd, Some(60_000)).unwrap();
        p.exp_string("/help lists commands").unwrap();
        p.send_line("clean up").unwrap();
        p.exp_string("Run it? [y]es / [n]o / [a]lways for this session:")
            .unwrap();
        p.send_control('c').unwrap();
        p.exp_string("Interrupted").unwrap();
        assert!(env.work.path().join("junk").is_dir(), "Ctrl-C ran it");
        p.send_line("/exit").unwrap();
        p.exp_eof().unwrap();
        let requests = provider.requests();
        assert_eq!(requests.len(), 1, "{requests:?}");
    }

    #[test]
    fn a_new_session_forgets_always() {
        let env = Env::new();
        std::fs::create_dir_all(env.work.path().join("x")).unwrap();
        std::fs::create_dir_all(env.work.path().join("y")).unwrap();
        let provider = FakeProvider::start(vec![
            Reply::tool("c1", "terminal", r#"{"command":"rm -rf x"}"#),
            Reply::text("x gone."),
            Reply::tool("c2", "terminal", r#"{"command":"rm -rf y"}"#),
            Reply::text("y stays."),
        ])
        .unwrap();
        let mut cmd = env.cmd(&provider.base_url());
        cmd.env("TERM", "dumb").arg("chat");
        let mut p = spawn_command(cmd, Some(60_000)).unwrap();
        p.exp_string("/help lists commands").unwrap();
        p.send_line("remove x").unwrap();
        p.exp_string("Run it?").unwrap();
        p.send_line("always").unwrap();
        p.exp_string("x gone.").unwrap();
        p.send_line("/new").unwrap();
        p.exp_string("new session").unwrap();
        p.send_line("remove y").unwrap();
        p.exp_string("Run it?").unwrap();
        p.send_line("no").unwrap();
        p.exp_string("y stays.").unwrap();
        assert!(env.work.path().join("y").is_dir());
        p.send_line("/exit").unwrap();
        p.exp_eof().unwrap();
    }

    #[test]
    fn oneshot_without_a_terminal_denies_and_says_why() {
        let env = Env::new();
        std::fs::create_dir_all(env.work.path().join("keep")).unwrap();
        let provider = FakeProvider::start(vec![
            Reply::tool("c1", "terminal", r#"{"command":"rm -rf keep"}"#),
            Reply::text("I could not delete it."),
        ])
        .unwrap();
        let o = env
            .cmd(&provider.base_url())
            .args(["-z", "delete keep"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(stdout(&o), "I could not delete it.\n");
        assert!(env.work.path().join("keep").is_dir());
        let results = tool_results(&provider.requests());
        assert!(results[0].contains("no one to ask"), "{}", results[0]);
        assert!(results[0].contains("approvals = \"off\""), "{}", results[0]);
        assert!(
            stderr(&o).contains("a dangerous command was denied: nobody can approve it here"),
            "{}",
            stderr(&o)
        );
    }

    #[test]
    fn approvals_off_runs_unasked_still_in_the_sandbox() {
        let env = Env::new();
        env.config("[agent]\napprovals = \"off\"\n");
        std::fs::create_dir_all(env.work.path().join("tmpjunk")).unwrap();
        let provider = FakeProvider::start(vec![
            Reply::tool(
                "c1",
                "terminal",
                r#"{"command":"rm -rf tmpjunk; touch ../hermes-x7-outside-probe 2>&1"}"#,
            ),
            Reply::text("ok"),
        ])
        .unwrap();
        let o = env
            .cmd(&provider.base_url())
            .args(["-z", "go"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(!env.work.path().join("tmpjunk").exists(), "ran unasked");
        let results = tool_results(&provider.requests());
        assert!(!results[0].contains("approval"), "{}", results[0]);
        assert!(
            results[0].contains("Permission denied"),
            "the sandbox still applies: {}",
            results[0]
        );
        assert!(!env.work.path().join("../hermes-x7-outside-probe").exists());
    }
}

mod mcp {
    use super::*;

    #[test]
    fn a_full_run_calls_one_server_session_twice() {
        hermes_tests::require!(Npm("mcp"));
        let env = Env::new();
        env.config(&everything_config());
        let provider = FakeProvider::start(vec![
            Reply::tool("c1", "mcp_everything_toggle-simulated-logging", "{}"),
            Reply::tool("c2", "mcp_everything_toggle-simulated-logging", "{}"),
            Reply::tool("c3", "mcp_everything_get-sum", r#"{"a": 40, "b": 2}"#),
            Reply::text("Toggled twice; the sum is 42."),
        ])
        .unwrap();
        let o = env
            .cmd(&provider.base_url())
            // Not every toolset: their specs beside the server's would push
            // the run past the default 8k window's compaction threshold.
            .args([
                "-z",
                "toggle logging twice, then add 40 and 2",
                "--toolsets",
                "mcp,terminal",
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(stdout(&o), "Toggled twice; the sum is 42.\n");
        let requests = provider.requests();
        let tools: Vec<&str> = requests[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert!(tools.contains(&"mcp_everything_echo"), "{tools:?}");
        assert!(tools.contains(&"terminal"), "built-ins stay: {tools:?}");
        let results = tool_results(&requests);
        // The server kept its state between the calls: one session, one process.
        assert!(
            results[0].starts_with("Started simulated"),
            "{}",
            results[0]
        );
        assert!(
            results[1].starts_with("Stopped simulated"),
            "{}",
            results[1]
        );
        assert_eq!(results[2], "The sum of 40 and 2 is 42.");
        assert!(
            provider.violations().is_empty(),
            "{:?}",
            provider.violations()
        );
    }

    #[test]
    fn mcp_list_shows_servers_state_and_tools_without_secrets() {
        hermes_tests::require!(Npm("mcp"));
        let env = Env::new();
        env.config(&format!(
            "{}env = {{ EVERYTHING_TOKEN = \"tok-very-secret-42\" }}\n\n\
             [mcp.servers.broken]\ncommand = \"/nonexistent/server\"\n",
            everything_config()
        ));
        let o = env
            .cmd("http://127.0.0.1:9/v1")
            .args(["mcp", "list"])
            .output()
            .unwrap();
        let out = stdout(&o);
        assert_eq!(
            o.status.code(),
            Some(1),
            "one server failed: {out}{}",
            stderr(&o)
        );
        assert!(out.contains("everything  [stdio] node "), "{out}");
        assert!(out.contains("state: running (pid "), "{out}");
        assert!(out.contains("mcp_everything_echo"), "{out}");
        assert!(out.contains("mcp_everything_get-sum"), "{out}");
        assert!(out.contains("broken  [stdio] /nonexistent/server"), "{out}");
        assert!(
            out.contains("state: failed: cannot run '/nonexistent/server'"),
            "{out}"
        );
        assert!(!out.contains("tok-very-secret-42") && !stderr(&o).contains("tok-very-secret-42"));

        let empty = Env::new();
        let o = empty
            .cmd("http://127.0.0.1:9/v1")
            .args(["mcp", "list"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0));
        assert!(
            stdout(&o).contains("No MCP servers are configured"),
            "{}",
            stdout(&o)
        );

        let bad = Env::new();
        bad.config("[mcp.servers.x]\nargs = [\"y\"]\n");
        let o = bad
            .cmd("http://127.0.0.1:9/v1")
            .args(["mcp", "list"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "configuration error");
        assert!(
            stderr(&o).contains("[mcp.servers.x] needs command"),
            "{}",
            stderr(&o)
        );
    }

    fn children_of(pid: u32) -> Vec<u32> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // pid (comm) state ppid …; comm may contain spaces.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(pid) {
                out.push(child);
            }
        }
        out
    }

    fn alive(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !stat
                .rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z')),
            Err(_) => false,
        }
    }

    /// The MCP server process a running hermes started.
    fn server_of(hermes: u32) -> u32 {
        let servers: Vec<u32> = children_of(hermes)
            .into_iter()
            .filter(|c| {
                std::fs::read(format!("/proc/{c}/cmdline"))
                    .map(|b| String::from_utf8_lossy(&b).contains("server-everything"))
                    .unwrap_or(false)
            })
            .collect();
        assert_eq!(servers.len(), 1, "one server process under hermes");
        servers[0]
    }

    /// Field 5 of /proc/PID/stat: the process group.
    fn process_group(pid: u32) -> u32 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let (_, rest) = stat.rsplit_once(')').unwrap();
        rest.split_whitespace().nth(2).unwrap().parse().unwrap()
    }

    fn wait_dead(pid: u32, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while alive(pid) {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn servers_have_their_own_group_and_stop_when_hermes_exits() {
        hermes_tests::require!(Npm("mcp"));
        let env = Env::new();
        env.config(&everything_config());
        let mut cmd = env.cmd("http://127.0.0.1:9/v1");
        cmd.env("TERM", "dumb").arg("chat");
        let mut p = spawn_command(cmd, Some(60_000)).unwrap();
        p.exp_string("/help lists commands").unwrap();
        let hermes = p.process.child_pid.as_raw() as u32;
        let server = server_of(hermes);
        assert_eq!(process_group(server), server, "its own process group");
        assert_ne!(process_group(server), process_group(hermes));
        p.send_line("/exit").unwrap();
        p.exp_eof().unwrap();
        wait_dead(server, "the MCP server outlived hermes's exit");
    }

    #[test]
    fn servers_die_with_a_sigkilled_hermes() {
        hermes_tests::require!(Npm("mcp"));
        let env = Env::new();
        env.config(&everything_config());
        let mut cmd = env.cmd("http://127.0.0.1:9/v1");
        cmd.env("TERM", "dumb").arg("chat");
        let mut p = spawn_command(cmd, Some(60_000)).unwrap();
        p.exp_string("/help lists commands").unwrap();
        let hermes = p.process.child_pid.as_raw() as u32;
        let server = server_of(hermes);
        let environ = std::fs::read(format!("/proc/{server}/environ")).unwrap();
        assert!(
            !String::from_utf8_lossy(&environ).contains("sk-provider-key"),
            "the provider key never reaches an MCP server"
        );
        let status = Command::new("kill")
            .args(["-9", &hermes.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        wait_dead(server, "the MCP server outlived a SIGKILLed hermes");
        let _ = p.process.wait();
        assert!(Path::new("/proc/self").exists());
    }
}

/// `clarify` (issue 46) in the CLI: a numbered picker on the terminal; no
/// terminal, nobody to answer.
mod clarify {
    use super::*;

    const QUESTION: &str = r#"{"question":"Which format?","choices":["PDF","HTML"]}"#;

    #[test]
    fn the_picker_takes_a_number_and_tells_a_wrong_one_the_range() {
        let env = Env::new();
        let provider = FakeProvider::start(vec![
            Reply::tool("c1", "clarify", QUESTION),
            Reply::text("Writing it as HTML."),
        ])
        .unwrap();
        let mut cmd = env.cmd(&provider.base_url());
        cmd.env("HERMES_TOOLSETS", "clarify")
            .env("TERM", "dumb")
            .arg("chat");
        let mut p = spawn_command(cmd, Some(60_000)).unwrap();
        p.exp_string("/help lists commands").unwrap();
        p.send_line("write the report").unwrap();
        p.exp_string("Which format?").unwrap();
        p.exp_string("1. PDF").unwrap();
        p.exp_string("2. HTML").unwrap();
        p.send_line("5").unwrap();
        p.exp_string("5 is not one of the options").unwrap();
        p.send_line("2").unwrap();
        p.exp_string("Writing it as HTML.").unwrap();
        p.send_line("/exit").unwrap();
        p.exp_eof().unwrap();
        let results = tool_results(&provider.requests());
        let result: Value = serde_json::from_str(&results[0]).unwrap();
        assert_eq!(result["user_response"], "HTML");
        assert_eq!(result["choice_number"], 2);
    }

    #[test]
    fn oneshot_without_a_terminal_says_no_one_can_answer() {
        let env = Env::new();
        let provider = FakeProvider::start(vec![
            Reply::tool("c1", "clarify", QUESTION),
            Reply::text("I chose PDF."),
        ])
        .unwrap();
        let o = env
            .cmd(&provider.base_url())
            .env("HERMES_TOOLSETS", "clarify")
            .args(["-z", "write the report"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(stdout(&o), "I chose PDF.\n");
        let results = tool_results(&provider.requests());
        assert!(
            results[0].contains("did not answer") && results[0].contains("no one can answer"),
            "{}",
            results[0]
        );
    }
}
