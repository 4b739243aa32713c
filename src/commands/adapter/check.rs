//! `trainyard adapter check FILE.wasm`: loads the adapter as this host
//! would and runs the conformance suite ([`trainyard_host::conformance`])
//! against fresh instances, no trainer launched. Prints each case as pass
//! or fail, with a hint for each failure; exits 0 only when all pass.

use crate::commands::format;
use crate::settings::Settings;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use trainyard_host::conformance::cases::Verdict;
use trainyard_host::conformance::{self, CheckError, Sample, SuiteReport};
use trainyard_host::runtime::AdapterRuntime;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The adapter component (.wasm)
    pub file: PathBuf,
    /// Params the adapter accepts (a JSON object): the on-output and finish
    /// cases run on an instance that prepared them, and each of their fields
    /// is tried with a value of the wrong type
    #[arg(long, value_name = "JSON", default_value = "{}")]
    pub params: String,
    /// The task kind of those params [default: the adapter's first]
    #[arg(long)]
    pub kind: Option<String>,
}

pub async fn run(settings: &Settings, args: CheckArgs) -> anyhow::Result<ExitCode> {
    let runtime = AdapterRuntime::new(crate::roles::runtime_config(settings))?;
    let sample = Sample {
        params: args.params,
        kind: args.kind.unwrap_or_default(),
    };
    let report = match conformance::check(&runtime, &args.file, &sample).await {
        Ok(report) => report,
        Err(CheckError::NotAnAdapterFile(e)) => {
            anyhow::bail!("{e}; `trainyard adapter check` takes an adapter component (.wasm)")
        }
        Err(e) => return Err(e.into()),
    };
    print_report(&args.file, &report);
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_report(file: &std::path::Path, report: &SuiteReport) {
    match &report.adapter {
        Some(info) => println!(
            "adapter {} {} ({}), kinds: {}",
            info.name,
            info.version,
            file.display(),
            info.kinds.join(", ")
        ),
        None => println!("adapter {}", file.display()),
    }
    let width = report.cases.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for case in &report.cases {
        let took = format::duration(case.took);
        match &case.verdict {
            Verdict::Pass => println!("PASS  {:<width$}  {took}", case.name),
            Verdict::Fail { why, hint } => {
                println!("FAIL  {:<width$}  {took}", case.name);
                println!("      {why}");
                println!("      hint: {hint}");
            }
        }
    }
    let passed = report
        .cases
        .iter()
        .filter(|c| c.verdict == Verdict::Pass)
        .count();
    let total = report.cases.len() + report.not_run;
    print!("{passed} of {total} cases passed");
    if report.not_run > 0 {
        print!(" ({} not run: the adapter did not load)", report.not_run);
    }
    println!();
}
