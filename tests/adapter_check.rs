//! `trainyard adapter check`: the repository's good adapters keep the
//! contract; the hostile ones fail, and the report names the cases they
//! fail and says how to fix them.

use crate::common;

use common::{explain, stdout};

use std::process::Output;

fn check(adapter: &std::path::Path, args: &[&str]) -> Output {
    let dir = tempfile::tempdir().expect("temporary directory");
    std::process::Command::new(&common::binaries().trainyard)
        .current_dir(dir.path())
        .args(["adapter", "check"])
        .arg(adapter)
        .args(args)
        .env("XDG_CACHE_HOME", common::user_cache_home())
        .output()
        .expect("run trainyard adapter check")
}

/// The names of the cases reported with `verdict` ("PASS" or "FAIL").
fn cases(out: &Output, verdict: &str) -> Vec<String> {
    stdout(out)
        .lines()
        .filter_map(|l| l.strip_prefix(verdict)?.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// A call deadline short enough that adapters that spin fail fast.
const SHORT_DEADLINE: [&str; 2] = ["--set", "host.adapter_call_timeout=300ms"];

#[test]
fn the_repositorys_good_adapters_pass_every_case() {
    let runs = [
        ("noop", r#"{"lines": 3}"#),
        ("python-trainer", r#"{"episodes": 20, "seed": 1}"#),
        ("cartpole", r#"{"episodes": 5, "hidden": 16}"#),
        ("noop", "{}"),
    ];
    for (adapter, params) in runs {
        let out = check(&common::adapter(adapter), &["--params", params]);
        assert!(
            out.status.success(),
            "{adapter} {params}: {}",
            explain(&out)
        );
        assert!(cases(&out, "FAIL").is_empty(), "{}", explain(&out));
        let passed = cases(&out, "PASS");
        for case in [
            "load/contract",
            "load/describe",
            "prepare/missing-params",
            "prepare/garbage",
            "on-output/64KiB",
            "finish/signaled-9",
            "finish/not-launched",
        ] {
            assert!(
                passed.iter().any(|c| c == case),
                "{adapter}: {case} not passed\n{}",
                explain(&out)
            );
        }
        if params.contains("episodes") {
            assert!(
                passed.iter().any(|c| c == "prepare/wrong-type:episodes"),
                "{}",
                explain(&out)
            );
        }
    }
}

#[test]
fn an_adapter_that_faults_in_finish_fails_exactly_the_finish_cases_with_a_hint() {
    let out = check(
        &common::adapter("hostile"),
        &["--params", r#"{"attack": "huge-result"}"#],
    );
    assert_eq!(out.status.code(), Some(1), "{}", explain(&out));
    let failed = cases(&out, "FAIL");
    assert_eq!(
        failed,
        [
            "finish/exited-0",
            "finish/exited-1",
            "finish/exited-137",
            "finish/signaled-9",
            "finish/not-launched"
        ],
        "{}",
        explain(&out)
    );
    let text = stdout(&out);
    assert!(text.contains("oversized result"), "{text}");
    assert!(
        text.contains("hint: finish must answer every exit status"),
        "{text}"
    );
    assert!(cases(&out, "PASS").iter().any(|c| c == "prepare/not-json"));
}

#[test]
fn an_adapter_that_spins_on_output_fails_the_on_output_cases() {
    let args = [
        &SHORT_DEADLINE[..],
        &["--params", r#"{"attack": "loop-output"}"#],
    ]
    .concat();
    let out = check(&common::adapter("hostile"), &args);
    assert_eq!(out.status.code(), Some(1), "{}", explain(&out));
    let failed = cases(&out, "FAIL");
    assert!(!failed.is_empty());
    assert!(
        failed.iter().all(|c| c.starts_with("on-output/")),
        "{}",
        explain(&out)
    );
    assert_eq!(failed.len(), 6, "{}", explain(&out));
    assert!(stdout(&out).contains("deadline"), "{}", explain(&out));
}

#[test]
fn an_adapter_whose_describe_never_returns_fails_the_describe_case() {
    let out = check(&common::adapter("hostile-describe"), &SHORT_DEADLINE);
    assert_eq!(out.status.code(), Some(1), "{}", explain(&out));
    assert_eq!(cases(&out, "FAIL"), ["load/describe"], "{}", explain(&out));
    assert_eq!(cases(&out, "PASS"), ["load/contract"], "{}", explain(&out));
    let text = stdout(&out);
    assert!(text.contains("deadline in describe"), "{text}");
    assert!(text.contains("not run: the adapter did not load"), "{text}");
}

#[test]
fn an_adapter_built_for_another_contract_version_fails_the_contract_case() {
    let out = check(&common::adapter("wrong-version"), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", explain(&out));
    assert_eq!(cases(&out, "FAIL"), ["load/contract"], "{}", explain(&out));
    let text = stdout(&out);
    assert!(text.contains("trainyard:adapter@0.2.0"), "{text}");
    assert!(text.contains("trainyard:adapter@0.1.x"), "{text}");
    assert!(text.contains("0 of 20 cases passed (19 not run"), "{text}");
}

#[test]
fn a_file_that_is_not_webassembly_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("adapter.wasm");
    std::fs::write(&file, "#!/bin/sh\necho not an adapter\n").unwrap();
    let out = check(&file, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", explain(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is not a WebAssembly file"), "{stderr}");
    assert!(cases(&out, "PASS").is_empty() && cases(&out, "FAIL").is_empty());
}
