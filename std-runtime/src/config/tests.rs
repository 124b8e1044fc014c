//! Tests of the loader: precedence, origins, validation.

#![allow(clippy::unwrap_used)]
use super::*;
use crate::client::{DEFAULT_CALL_TIMEOUT, DEFAULT_FIRST_BYTE_TIMEOUT};
use crate::media::DEFAULT_TRANSCRIPTION_MODEL;
use crate::redact::mask;
use crate::secret::Secret;
use crate::tools::SearchBackend;

fn home_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

fn env(home: &Path, pairs: &[(&str, &str)]) -> Environment {
    let mut all = vec![("HERMES_HOME".to_owned(), home.display().to_string())];
    all.extend(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    Environment::from_pairs(all)
}

fn cwd_overrides() -> Overrides {
    Overrides {
        workdir: Some(PathBuf::from("/tmp")),
        ..Overrides::default()
    }
}

#[test]
fn defaults_to_local_server() {
    let home = home_with(&[]);
    let s = load(&cwd_overrides(), &env(home.path(), &[])).unwrap();
    assert_eq!(s.provider.base_url, LOCAL_BASE_URL);
    assert_eq!(s.provider.model, LOCAL_DEFAULT_MODEL);
    assert_eq!(s.provider.api_key, None);
    assert_eq!(s.max_iterations, 90);
    assert_eq!(s.origins["base_url"], Origin::Default);
}

#[test]
fn openrouter_key_selects_openrouter() {
    let home = home_with(&[]);
    let s = load(
        &cwd_overrides(),
        &env(home.path(), &[("OPENROUTER_API_KEY", "sk-or-123456789")]),
    )
    .unwrap();
    assert_eq!(s.provider.base_url, OPENROUTER_BASE_URL);
    assert_eq!(s.provider.provider_name, "openrouter");
    assert_eq!(
        s.provider.api_key.as_ref().map(Secret::expose),
        Some("sk-or-123456789")
    );
}

#[test]
fn a_vendors_key_only_goes_to_that_vendor() {
    let home = home_with(&[]);
    let both = [
        ("OPENAI_API_KEY", "sk-openai-123456789"),
        ("OPENROUTER_API_KEY", "sk-or-123456789"),
    ];
    let s = load(&cwd_overrides(), &env(home.path(), &both)).unwrap();
    assert_eq!(s.provider.provider_name, "openrouter");
    assert_eq!(
        s.provider.api_key.as_ref().map(Secret::expose),
        Some("sk-or-123456789")
    );

    let mut custom = both.to_vec();
    custom.push(("HERMES_BASE_URL", "https://api.openai.com/v1"));
    let s = load(&cwd_overrides(), &env(home.path(), &custom)).unwrap();
    assert_eq!(
        s.provider.api_key.as_ref().map(Secret::expose),
        Some("sk-openai-123456789")
    );

    let only_or = [
        ("OPENROUTER_API_KEY", "sk-or-123456789"),
        ("HERMES_BASE_URL", "https://llm.example.com/v1"),
    ];
    let s = load(&cwd_overrides(), &env(home.path(), &only_or)).unwrap();
    assert_eq!(
        s.provider.api_key, None,
        "no OpenRouter key to a custom server"
    );
}

#[test]
fn precedence_flag_env_dotenv_file() {
    let home = home_with(&[
        (
            ".env",
            "HERMES_MODEL=from-dotenv\nHERMES_BASE_URL=http://dotenv/v1\n",
        ),
        (
            "config.toml",
            "[provider]\nmodel = \"from-file\"\nbase_url = \"http://file/v1\"\napi_key = \"file-key-123456\"\n[agent]\nmax_iterations = 7\ntoolsets = [\"file\"]\n",
        ),
    ]);
    let e = env(home.path(), &[("HERMES_BASE_URL", "http://env/v1")]);
    let s = load(&cwd_overrides(), &e).unwrap();
    assert_eq!(s.provider.base_url, "http://env/v1");
    assert_eq!(s.provider.model, "from-dotenv");
    assert_eq!(
        s.provider.api_key.as_ref().map(Secret::expose),
        Some("file-key-123456")
    );
    assert_eq!(s.max_iterations, 7);
    assert_eq!(s.toolsets, Some(vec!["file".to_owned()]));
    assert_eq!(s.origins["model"], Origin::DotEnv("HERMES_MODEL"));

    let flags = Overrides {
        model: Some("from-flag".into()),
        max_iterations: Some(3),
        ..cwd_overrides()
    };
    let s = load(&flags, &e).unwrap();
    assert_eq!(s.provider.model, "from-flag");
    assert_eq!(s.max_iterations, 3);
    assert_eq!(s.origins["model"], Origin::Flag);
}

#[test]
fn bad_values_name_the_key() {
    let home = home_with(&[("config.toml", "[agent]\nmax_iterations = \"lots\"\n")]);
    let err = load(&cwd_overrides(), &env(home.path(), &[])).unwrap_err();
    assert!(err.to_string().contains("max_iterations"), "{err}");

    let home = home_with(&[("config.toml", "this is = = not toml")]);
    let err = load(&cwd_overrides(), &env(home.path(), &[])).unwrap_err();
    assert!(err.to_string().contains("config.toml"), "{err}");

    let home = home_with(&[]);
    let err = load(
        &cwd_overrides(),
        &env(home.path(), &[("HERMES_BASE_URL", "ftp://x")]),
    )
    .unwrap_err();
    assert!(err.to_string().contains("base_url"), "{err}");
}

#[test]
fn spending_caps_are_loaded_and_bad_ones_refused_before_anything_runs() {
    let home = home_with(&[(
        "config.toml",
        "[gateway]\ntimezone = \"Europe/Berlin\"\n[limits]\nuser_day_tokens = 20000\nbot_month_usd = 30\n",
    )]);
    let settings = load(
        &cwd_overrides(),
        &env(home.path(), &[("HERMES_LIMIT_USER_MONTH_USD", "5")]),
    )
    .unwrap();
    let limits = settings.spending_limits().unwrap();
    assert_eq!(limits.user_day_tokens, Some(20_000));
    assert_eq!(limits.user_month_usd, Some(5.0));
    assert_eq!(limits.bot_month_usd, Some(30.0));
    assert_eq!(
        limits.tz.iana_name(),
        Some("Europe/Berlin"),
        "[gateway] timezone"
    );
    for (toml, vars, says) in [
        (
            "[limits]\nuser_day_tokens = -100\n",
            &[][..],
            "[limits] user_day_tokens: -100 is not a cap",
        ),
        (
            "[limits]\nuser_day_usd = 5e9\n",
            &[],
            "[limits] user_day_usd: 5000000000 is not a cap",
        ),
        (
            "[limits]\nuser_day_usd = true\n",
            &[],
            "user_day_usd must be a number",
        ),
        (
            "[limits]\nuser_day_token = 5\n",
            &[],
            "did you mean 'user_day_tokens'",
        ),
        (
            "",
            &[("HERMES_LIMIT_BOT_DAY_USD", "-3")],
            "HERMES_LIMIT_BOT_DAY_USD: -3 is not a cap",
        ),
    ] {
        let home = home_with(&[("config.toml", toml)]);
        let err = load(&cwd_overrides(), &env(home.path(), vars)).unwrap_err();
        assert!(err.to_string().contains(says), "{toml}: {err}");
    }
}

#[test]
fn sandbox_keys_and_their_flags() {
    let home = home_with(&[]);
    let s = load(
        &cwd_overrides(),
        &env(home.path(), &[("HOME", "/home/ana")]),
    )
    .unwrap();
    assert_eq!(s.sandbox, SandboxMode::On, "on by default");
    assert!(!s.allow_outside_workdir);
    assert!(s.env_passthrough.is_empty());

    let home = home_with(&[(
        "config.toml",
        "[agent]\nsandbox = \"off\"\nallow_outside_workdir = true\n\
         env_passthrough = [\"EDITOR\", \"CARGO_*\"]\nsandbox_read = [\"~/.rustup\"]\n\
         sandbox_write = [\"/srv/cache\"]\n",
    )]);
    let e = env(home.path(), &[("HOME", "/home/ana")]);
    let s = load(&cwd_overrides(), &e).unwrap();
    assert_eq!(s.sandbox, SandboxMode::Off);
    assert!(s.allow_outside_workdir);
    assert_eq!(s.env_passthrough, ["EDITOR", "CARGO_*"]);
    assert_eq!(s.sandbox_read, [PathBuf::from("/home/ana/.rustup")]);
    assert_eq!(s.sandbox_write, [PathBuf::from("/srv/cache")]);

    let flags = Overrides {
        sandbox: Some(SandboxMode::Off),
        allow_outside_workdir: Some(true),
        ..cwd_overrides()
    };
    let home = home_with(&[]);
    let s = load(&flags, &env(home.path(), &[])).unwrap();
    assert_eq!(s.sandbox, SandboxMode::Off);
    assert!(s.allow_outside_workdir);

    let home = home_with(&[("config.toml", "[agent]\nsandbox = \"maybe\"\n")]);
    let err = load(&cwd_overrides(), &env(home.path(), &[])).unwrap_err();
    assert!(err.to_string().contains("sandbox"), "{err}");
}

#[test]
fn context_settings_and_their_bounds() {
    let home = home_with(&[(
        "config.toml",
        "[provider]\ncontext_length = 16384\ncompression_model = \"small-model\"\n[agent]\ncompress_threshold = 60\n",
    )]);
    let s = load(&cwd_overrides(), &env(home.path(), &[])).unwrap();
    assert_eq!(s.context_length, Some(16_384));
    assert_eq!(s.compression_model.as_deref(), Some("small-model"));
    assert_eq!(s.compress_threshold, 60);
    assert_eq!(
        s.origins["context_length"],
        Origin::ConfigFile("provider.context_length")
    );
    let s = load(
        &cwd_overrides(),
        &env(home.path(), &[("HERMES_CONTEXT_LENGTH", "4096")]),
    )
    .unwrap();
    assert_eq!(s.context_length, Some(4_096));
    assert_eq!(
        s.origins["context_length"],
        Origin::Env("HERMES_CONTEXT_LENGTH")
    );

    let defaults = load(&cwd_overrides(), &env(home_with(&[]).path(), &[])).unwrap();
    assert_eq!(
        (defaults.context_length, defaults.compress_threshold),
        (None, 70)
    );
    for (var, value) in [
        ("HERMES_CONTEXT_LENGTH", "lots"),
        ("HERMES_CONTEXT_LENGTH", "100"),
        ("HERMES_COMPRESS_THRESHOLD", "99"),
    ] {
        let err = load(&cwd_overrides(), &env(home.path(), &[(var, value)])).unwrap_err();
        assert!(
            err.to_string().contains(if var.contains("THRESHOLD") {
                "compress_threshold"
            } else {
                var
            }),
            "{err}"
        );
    }
}

#[test]
fn the_summarizer_cooldown_defaults_to_ten_minutes_and_refuses_zero() {
    let defaults = load(&cwd_overrides(), &env(home_with(&[]).path(), &[])).unwrap();
    assert_eq!(
        defaults.summarizer_cooldown,
        std::time::Duration::from_secs(600)
    );
    let home = home_with(&[("config.toml", "[agent]\nsummarizer_cooldown_secs = 30\n")]);
    let s = load(&cwd_overrides(), &env(home.path(), &[])).unwrap();
    assert_eq!(s.summarizer_cooldown, std::time::Duration::from_secs(30));
    for bad in ["0", "-5", "\"10m\""] {
        let home = home_with(&[(
            "config.toml",
            &format!("[agent]\nsummarizer_cooldown_secs = {bad}\n"),
        )]);
        let err = load(&cwd_overrides(), &env(home.path(), &[])).unwrap_err();
        assert!(
            err.to_string().contains("summarizer_cooldown_secs"),
            "{bad}: {err}"
        );
    }
}

#[test]
fn toolsets_accept_spaces_and_none_and_refuse_typos() {
    let home = home_with(&[]);
    let flags = Overrides {
        toolsets: Some(vec!["file".into(), " todo".into()]),
        ..cwd_overrides()
    };
    let s = load(&flags, &env(home.path(), &[])).unwrap();
    assert_eq!(s.toolsets, Some(vec!["file".to_owned(), "todo".to_owned()]));
    let s = load(
        &cwd_overrides(),
        &env(home.path(), &[("HERMES_TOOLSETS", "none")]),
    )
    .unwrap();
    assert_eq!(s.toolsets, Some(vec![]));
    // Every toolset the registry builds may be named (SPEC Y8 added `skills`).
    for (name, _) in crate::tools::TOOLSETS {
        assert!(TOOLSET_NAMES.contains(name), "{name}");
    }
    let s = load(
        &cwd_overrides(),
        &env(home.path(), &[("HERMES_TOOLSETS", "skills")]),
    )
    .unwrap();
    assert_eq!(s.toolsets, Some(vec!["skills".to_owned()]));
    let err = load(
        &cwd_overrides(),
        &env(home.path(), &[("HERMES_TOOLSETS", "fiel")]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("HERMES_TOOLSETS") && err.contains("did you mean 'file'"),
        "{err}"
    );
}

#[test]
fn typos_in_the_files_stop_loading_and_every_one_is_named() {
    let home = home_with(&[
        (
            "config.toml",
            "[providr]\nmodel = \"x\"\n[agent]\nmax_iteration = 3\n",
        ),
        (".env", "HERMES_MODEL=ok\nthis line is broken\n"),
    ]);
    let err = load(&cwd_overrides(), &env(home.path(), &[])).unwrap_err();
    assert!(
        matches!(err, ConfigError::Several(ref v) if v.len() == 3),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains(".env:2"), "{text}");
    assert!(text.contains("did you mean 'provider'"), "{text}");
    assert!(text.contains("did you mean 'max_iterations'"), "{text}");
}

#[test]
fn dotenv_parsing() {
    let m =
        parse_dotenv("# c\nexport A=1\nB=\"two words\"\nC='x'\nD=plain # note\n=bad\nnot a line\n");
    assert_eq!(m["A"], "1");
    assert_eq!(m["B"], "two words");
    assert_eq!(m["C"], "x");
    assert_eq!(m["D"], "plain");
    assert_eq!(m.len(), 4);
}

#[test]
fn masking_hides_secrets() {
    assert_eq!(mask("sk-abcdefghijkl1234"), "sk-…1234");
    assert_eq!(mask("short"), "****");
    let p = ProviderSettings {
        base_url: "https://proxyuser:hunter2pass@llm.example/v1".into(),
        api_key: Some("sk-verysecretvalue99".into()),
        model: "m".into(),
        provider_name: "custom".into(),
        first_byte_timeout: DEFAULT_FIRST_BYTE_TIMEOUT,
        call_timeout: DEFAULT_CALL_TIMEOUT,
        api: Api::OpenAi,
        cache: CacheMode::Auto,
        cache_ttl_1h: false,
        reasoning_effort: None,
        reasoning_echo: EchoMode::Auto,
        price: None,
        fallbacks: vec![FallbackProvider {
            base_url: "y".into(),
            api_key: Some("sk-fallbacksecret77".into()),
            model: "f".into(),
            api: Api::OpenAi,
            provider_name: "custom".into(),
            price: None,
        }],
    };
    let shown = format!("{p:?}");
    assert!(!shown.contains("verysecret"), "{shown}");
    assert!(!shown.contains("fallbacksecret"), "{shown}");
    assert!(
        !shown.contains("hunter2pass") && !shown.contains("proxyuser"),
        "{shown}"
    );
    assert!(shown.contains("https://***@llm.example/v1"), "{shown}");
}

#[test]
fn credentials_in_urls_are_masked_for_display() {
    for (url, shown) in [
        ("https://u:p@host/v1", "https://***@host/v1"),
        (
            "http://token@127.0.0.1:8080/v1",
            "http://***@127.0.0.1:8080/v1",
        ),
        ("https://u:p%40x@host", "https://***@host"),
        ("https://host/v1?next=a@b", "https://host/v1?next=a@b"),
        ("https://host/user@v1", "https://host/user@v1"),
        ("http://127.0.0.1:11434/v1", "http://127.0.0.1:11434/v1"),
        ("not a url", "not a url"),
    ] {
        assert_eq!(redact_url(url), shown, "{url}");
    }
}

#[test]
fn a_refused_base_url_is_named_without_its_credentials() {
    let home = home_with(&[]);
    let err = load(
        &cwd_overrides(),
        &env(
            home.path(),
            &[("HERMES_BASE_URL", "ftp://user:pw-in-env@host/v1")],
        ),
    )
    .unwrap_err()
    .to_string();
    assert!(
        !err.contains("pw-in-env") && err.contains("ftp://***@host/v1"),
        "{err}"
    );
    let home = home_with(&[(
        "config.toml",
        "[provider]\nbase_url = \"ftp://user:pw-in-file@host/v1\"\n",
    )]);
    let err = load(&cwd_overrides(), &env(home.path(), &[]))
        .unwrap_err()
        .to_string();
    assert!(
        !err.contains("pw-in-file") && err.contains("ftp://***@host/v1"),
        "{err}"
    );
}

#[test]
fn provider_timeouts_default_and_come_from_env_or_file() {
    let home = home_with(&[]);
    let s = load(&cwd_overrides(), &env(home.path(), &[])).unwrap();
    assert_eq!(s.provider.first_byte_timeout, Duration::from_secs(30));
    assert_eq!(s.provider.call_timeout, Duration::from_secs(90));
    assert_eq!(s.origins["call_timeout"], Origin::Default);

    let home = home_with(&[(
        "config.toml",
        "[provider]\nfirst_byte_timeout_secs = 45\ncall_timeout_secs = 300\n",
    )]);
    let s = load(&cwd_overrides(), &env(home.path(), &[])).unwrap();
    assert_eq!(s.provider.first_byte_timeout, Duration::from_secs(45));
    assert_eq!(s.provider.call_timeout, Duration::from_secs(300));
    assert_eq!(
        s.origins["call_timeout"],
        Origin::ConfigFile("provider.call_timeout_secs")
    );
    let s = load(
        &cwd_overrides(),
        &env(home.path(), &[("HERMES_CALL_TIMEOUT", "600")]),
    )
    .unwrap();
    assert_eq!(s.provider.call_timeout, Duration::from_secs(600));
    assert_eq!(
        s.origins["call_timeout"],
        Origin::Env("HERMES_CALL_TIMEOUT")
    );

    for bad in ["0", "soon", "-5"] {
        let err = load(
            &cwd_overrides(),
            &env(home.path(), &[("HERMES_FIRST_BYTE_TIMEOUT", bad)]),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("HERMES_FIRST_BYTE_TIMEOUT"),
            "{err}"
        );
    }
    let home = home_with(&[("config.toml", "[provider]\ncall_timeout_secs = 0\n")]);
    let err = load(&cwd_overrides(), &env(home.path(), &[])).unwrap_err();
    assert!(err.to_string().contains("call_timeout_secs"), "{err}");
}

#[test]
fn media_settings_vision_and_transcription() {
    let home = home_with(&[]);
    let s = load(&cwd_overrides(), &env(home.path(), &[])).unwrap();
    assert_eq!(s.media, MediaSettings::default(), "nothing configured");

    let home = home_with(&[(
        "config.toml",
        "[provider]\nvision = false\nvision_model = \"llava\"\n\n[transcription]\nbase_url = \"http://127.0.0.1:8080/v1\"\nlanguage = \"de\"\ntimeout_secs = 30\n",
    )]);
    let s = load(&cwd_overrides(), &env(home.path(), &[])).unwrap();
    assert_eq!(s.media.vision, Some(false));
    assert_eq!(s.media.vision_model.as_deref(), Some("llava"));
    let t = s.media.transcription.clone().unwrap();
    assert_eq!(t.base_url, "http://127.0.0.1:8080/v1");
    assert_eq!(t.model, DEFAULT_TRANSCRIPTION_MODEL);
    assert_eq!(t.api_key, None, "a local server gets no vendor key");
    assert_eq!(t.language.as_deref(), Some("de"));
    assert_eq!(t.timeout, Duration::from_secs(30));
    assert_eq!(
        s.origins["transcription_base_url"],
        Origin::ConfigFile("transcription.base_url")
    );

    // The environment wins; OpenAI's endpoint gets OPENAI_API_KEY, no other does.
    let s = load(
        &cwd_overrides(),
        &env(
            home.path(),
            &[
                ("HERMES_VISION", "yes"),
                ("HERMES_TRANSCRIPTION_BASE_URL", "https://api.openai.com/v1"),
                ("HERMES_TRANSCRIPTION_MODEL", "gpt-4o-mini-transcribe"),
                ("OPENAI_API_KEY", "sk-openai-123456789"),
            ],
        ),
    )
    .unwrap();
    assert_eq!(s.media.vision, Some(true));
    let t = s.media.transcription.unwrap();
    assert_eq!(
        t.api_key.as_ref().map(Secret::expose),
        Some("sk-openai-123456789")
    );
    assert_eq!(t.model, "gpt-4o-mini-transcribe");
    assert!(!format!("{t:?}").contains("sk-openai-123456789"));
}

#[test]
fn media_setting_typos_and_bad_values_are_errors() {
    let home = home_with(&[("config.toml", "[transcription]\nbase_ulr = \"http://x\"\n")]);
    let err = load(&cwd_overrides(), &env(home.path(), &[])).unwrap_err();
    assert!(err.to_string().contains("did you mean 'base_url'"), "{err}");
    let home = home_with(&[("config.toml", "[transcription]\nbase_url = \"ftp://x\"\n")]);
    assert!(load(&cwd_overrides(), &env(home.path(), &[])).is_err());
    let home = home_with(&[]);
    let err = load(
        &cwd_overrides(),
        &env(home.path(), &[("HERMES_VISION", "maybe")]),
    )
    .unwrap_err();
    assert!(err.to_string().contains("HERMES_VISION"), "{err}");
}

#[test]
fn approvals_web_search_and_mcp_keys() {
    let home = home_with(&[]);
    let s = load(&cwd_overrides(), &env(home.path(), &[])).unwrap();
    assert_eq!(s.approvals, ApprovalMode::Ask, "asks by default");
    assert_eq!(s.approval_timeout, std::time::Duration::from_secs(300));
    assert_eq!(s.web_search.effective_backend(), SearchBackend::DuckDuckGo);
    assert!(s.mcp_servers.is_empty());

    let home = home_with(&[(
        "config.toml",
        "[agent]\napprovals = \"off\"\napproval_timeout = 30\n\
         [web]\nsearch_backend = \"brave\"\n\
         [mcp.servers.files]\ncommand = \"mcp-files\"\nenv = { TOKEN = \"${FILES_TOKEN}\" }\n",
    )]);
    let e = env(
        home.path(),
        &[
            ("BRAVE_API_KEY", "BSA-123456789"),
            ("FILES_TOKEN", "files-secret-1"),
        ],
    );
    let s = load(&cwd_overrides(), &e).unwrap();
    assert_eq!(s.approvals, ApprovalMode::Off);
    assert_eq!(s.approval_timeout, std::time::Duration::from_secs(30));
    assert_eq!(s.web_search.effective_backend(), SearchBackend::Brave);
    assert_eq!(s.mcp_servers[0].name, "files");
    assert!(!format!("{:?}", s.mcp_servers).contains("files-secret-1"));
    assert!(!format!("{:?}", s.web_search).contains("BSA-123456789"));

    for (text, want) in [
        ("[agent]\napprovals = \"sometimes\"\n", "approvals"),
        ("[agent]\napproval_timeout = 0\n", "approval_timeout"),
        ("[web]\nsearch_backend = \"bing\"\n", "search_backend"),
        ("[web]\nsearch_backend = \"tavily\"\n", "TAVILY_API_KEY"),
        ("[web]\nsearxng_url = \"localhost:8888\"\n", "searxng_url"),
        ("[mcp.servers.x]\nurl = \"ftp://x\"\n", "[mcp.servers.x]"),
    ] {
        let home = home_with(&[("config.toml", text)]);
        let err = load(&cwd_overrides(), &env(home.path(), &[])).unwrap_err();
        assert!(err.to_string().contains(want), "{text:?}: {err}");
    }
}

#[test]
fn tts_settings_defaults_env_key_and_errors() {
    use crate::media::tts::{AudioFormat, DEFAULT_TTS_MAX_CHARS, DEFAULT_TTS_VOICE};
    let home = home_with(&[]);
    let s = load(&cwd_overrides(), &env(home.path(), &[])).unwrap();
    assert!(s.media.tts.is_none(), "nothing configured: no speech");

    let home = home_with(&[(
        "config.toml",
        "[tts]\nbase_url = \"http://127.0.0.1:8880/v1\"\nmodel = \"kokoro\"\nmax_chars = 400\n",
    )]);
    let s = load(
        &cwd_overrides(),
        &env(
            home.path(),
            &[
                ("HERMES_TTS_API_KEY", "sk-tts-0123456789"),
                ("OPENAI_API_KEY", "sk-openai-123456789"),
            ],
        ),
    )
    .unwrap();
    let t = s.media.tts.clone().unwrap();
    assert_eq!(t.model, "kokoro");
    assert_eq!(t.voice, DEFAULT_TTS_VOICE);
    assert_eq!(t.format, AudioFormat::Opus, "Ogg/Opus unless told");
    assert_eq!(t.max_chars, 400);
    assert_eq!(
        t.api_key.as_ref().map(Secret::expose),
        Some("sk-tts-0123456789")
    );
    assert!(
        !format!("{:?}", s.media).contains("sk-tts-0123456789"),
        "masked"
    );

    // A local server never gets the vendor's key.
    let home = home_with(&[(
        "config.toml",
        "[tts]\nbase_url = \"http://127.0.0.1:8880/v1\"\n",
    )]);
    let s = load(
        &cwd_overrides(),
        &env(home.path(), &[("OPENAI_API_KEY", "sk-openai-123456789")]),
    )
    .unwrap();
    let t = s.media.tts.unwrap();
    assert_eq!(t.api_key, None);
    assert_eq!(t.max_chars, DEFAULT_TTS_MAX_CHARS);

    for bad in [
        "[tts]\nbase_url = \"http://x/v1\"\nformat = \"ogg-vorbis\"\n",
        "[tts]\nbase_url = \"http://x/v1\"\nmax_chars = 0\n",
        "[tts]\nbase_url = \"http://x/v1\"\nvoise = \"nova\"\n",
        "[tts]\nbase_url = \"ftp://x\"\n",
    ] {
        let home = home_with(&[("config.toml", bad)]);
        assert!(
            load(&cwd_overrides(), &env(home.path(), &[])).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn the_loaded_settings_types_never_show_a_key() {
    // Every key the loader reads, through the real loader: what `Debug`
    // shows of the settings that hold them is the mask, never the key.
    let keys = [
        ("OPENROUTER_API_KEY", "sk-or-v1-primarysecret0001"),
        ("HERMES_FALLBACK_MODEL", "backup"),
        ("HERMES_FALLBACK_BASE_URL", "https://llm.example/v1"),
        ("HERMES_FALLBACK_API_KEY", "sk-fallbacksecret0002"),
        ("HERMES_TRANSCRIPTION_BASE_URL", "https://stt.example/v1"),
        ("HERMES_TRANSCRIPTION_API_KEY", "sk-whispersecret0003"),
        ("BRAVE_API_KEY", "brave-searchsecret0004"),
        ("TAVILY_API_KEY", "tvly-searchsecret0005"),
    ];
    let home = home_with(&[]);
    let s = load(&cwd_overrides(), &env(home.path(), &keys)).unwrap();
    assert_eq!(
        s.provider.api_key.as_ref().map(Secret::expose),
        Some("sk-or-v1-primarysecret0001"),
        "the loader read the key"
    );
    let shown = format!(
        "{:?} {:?} {:?} {:#?}",
        s.provider, s.media, s.web_search, s.provider.fallbacks
    );
    for (_, secret) in keys.iter().filter(|(name, _)| name.ends_with("_KEY")) {
        let middle = &secret[4..secret.len() - 4];
        assert!(!shown.contains(middle), "{secret} shown: {shown}");
    }
    assert!(
        shown.contains("sk-…0001"),
        "the key is recognisable: {shown}"
    );
}

#[test]
fn debug_shows_no_key_from_the_flags_the_environment_dotenv_or_the_file() {
    let home = home_with(&[
        (
            "config.toml",
            "[provider]\nbase_url = \"https://api.openai.com/v1\"\napi_key = \"sk-file-0123456789abcdef\"\n\
             [[provider.fallback]]\nbase_url = \"https://llm.example.com/v1\"\napi_key = \"sk-fallback-0123456789\"\nmodel = \"m\"\n\
             [mcp.servers.files]\ncommand = \"mcp-files\"\nenv = { TOKEN = \"mcp-literal-0123456789\" }\n\
             [email]\npassword = \"email-password-0123456789\"\n",
        ),
        (".env", "TAVILY_API_KEY=tvly-dotenv-0123456789\n"),
    ]);
    let e = env(
        home.path(),
        &[
            ("OPENROUTER_API_KEY", "sk-or-v1-env-0123456789abcdef"),
            ("BRAVE_API_KEY", "BSA-env-0123456789"),
            ("AWS_SECRET_ACCESS_KEY", "aws-not-ours-0123456789"),
            (
                "HERMES_DATABASE_URL",
                "postgres://hermes:db-password-0123456789@db.example.org/hermes",
            ),
        ],
    );
    let overrides = Overrides {
        api_key: Some("sk-flag-0123456789abcdef".into()),
        ..cwd_overrides()
    };
    let s = load(&overrides, &e).unwrap();
    assert_eq!(
        s.provider.api_key.as_ref().map(Secret::expose),
        Some("sk-flag-0123456789abcdef")
    );
    let shown = [
        format!("{s:?}"),
        format!("{s:#?}"),
        format!("{overrides:?}"),
    ]
    .concat();
    for secret in [
        "sk-file-0123456789",
        "sk-fallback-0123456789",
        "mcp-literal-0123456789",
        "email-password-0123456789",
        "tvly-dotenv-0123456789",
        "sk-or-v1-env-0123456789",
        "BSA-env-0123456789",
        "aws-not-ours-0123456789",
        "db-password-0123456789",
        "sk-flag-0123456789",
    ] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    // What the settings are stays visible.
    assert!(shown.contains("OPENROUTER_API_KEY"), "{shown}");
    assert!(shown.contains("db.example.org"), "{shown}");
    assert!(shown.contains("api.openai.com"), "{shown}");
}
