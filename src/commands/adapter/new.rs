//! `trainyard adapter new NAME [--lang rust|python] [--dir D]`: a ready
//! adapter project, anywhere, that builds with one command.
//!
//! The project is a template from `templates/<lang>/` (embedded in the
//! binary) with the adapter's name filled in, plus the contract this
//! binary's hosts speak, vendored as `wit/adapter.wit`, so the project
//! needs nothing from trainyard's repository. [`render`] decides every
//! file's path and text; [`run`] only writes them.

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
pub struct NewArgs {
    /// The adapter's name: what tasks name it by (lower-case letters,
    /// digits and '-', starting with a letter)
    pub name: String,
    /// The language the adapter is written in
    #[arg(long, value_enum, default_value_t = Lang::Rust)]
    pub lang: Lang,
    /// Where to create the project [default: ./NAME]; must not exist or be empty
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    Rust,
    /// Built with componentize-py (installed into the project by `make`)
    Python,
}

/// The contract, as the hosts of this binary speak it.
const CONTRACT: &str = include_str!("../../../wit/adapter.wit");

/// A template file: where it goes in the project, and its text with
/// `__NAME__` (the adapter's name) and `__CRATE__` (its Rust crate name)
/// still in it.
struct TemplateFile {
    path: &'static str,
    text: &'static str,
}

macro_rules! template {
    ($lang:literal: $($from:literal => $to:literal),* $(,)?) => {
        &[$(TemplateFile {
            path: $to,
            text: include_str!(concat!("../../../templates/", $lang, "/", $from)),
        }),*]
    };
}

const RUST: &[TemplateFile] = template!("rust":
    "Cargo.toml" => "Cargo.toml",
    "Makefile" => "Makefile",
    "README.md" => "README.md",
    "gitignore" => ".gitignore",
    "src/lib.rs" => "src/lib.rs",
    "trainer/train.py" => "trainer/train.py",
);

const PYTHON: &[TemplateFile] = template!("python":
    "Makefile" => "Makefile",
    "README.md" => "README.md",
    ".gitignore" => ".gitignore",
    "app.py" => "app.py",
    "logic.py" => "logic.py",
    "test_logic.py" => "test_logic.py",
    "trainer.py" => "trainer.py",
);

fn template(lang: Lang) -> &'static [TemplateFile] {
    match lang {
        Lang::Rust => RUST,
        Lang::Python => PYTHON,
    }
}

/// Checks a new adapter's name: the contract's rule for adapter names, and
/// a letter first, so it is a valid package name in every language.
pub fn check_name(name: &str) -> Result<(), String> {
    trainyard_host::runtime::check_adapter_name(name)
        .map_err(|e| format!("the adapter name {e}"))?;
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) || name.ends_with('-') {
        return Err(format!(
            "the adapter name {name:?} must start with a letter and not end with '-'"
        ));
    }
    Ok(())
}

/// Every file of the project for adapter `name`, relative to the project's
/// directory, with the placeholders filled in.
pub fn render(lang: Lang, name: &str) -> Vec<(PathBuf, String)> {
    let crate_name = name.replace('-', "_");
    let fill = |text: &str| {
        text.replace("__NAME__", name)
            .replace("__CRATE__", &crate_name)
    };
    template(lang)
        .iter()
        .map(|f| (PathBuf::from(f.path), fill(f.text)))
        .chain([(PathBuf::from("wit/adapter.wit"), CONTRACT.to_owned())])
        .collect()
}

/// Writes the project and says what to do next.
pub fn run(args: NewArgs) -> anyhow::Result<()> {
    check_name(&args.name).map_err(anyhow::Error::msg)?;
    let dir = args.dir.unwrap_or_else(|| PathBuf::from(&args.name));
    ensure_empty(&dir)?;
    for (path, text) in render(args.lang, &args.name) {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    println!("created {} ({:?})", dir.display(), args.lang);
    println!("next:");
    println!("  cd {}", dir.display());
    println!("  make          # build dist/{}.wasm", args.name);
    println!("  make test     # the adapter's own unit tests");
    println!("  make check    # trainyard adapter check");
    println!("  make run      # trainyard adapter run: one attempt on this machine");
    println!("README.md there says how to ship it to hosts.");
    Ok(())
}

/// A project goes into a new or empty directory only: nothing of the
/// author's is overwritten.
fn ensure_empty(dir: &Path) -> anyhow::Result<()> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                bail!(
                    "{} exists and is not empty; choose another --dir",
                    dir.display()
                );
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", dir.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_contract_and_start_with_a_letter() {
        for good in ["bandit", "my-adapter-2"] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        for bad in ["", "My", "2fast", "a_b", "trailing-", &"a".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_project_carries_the_contract_and_no_placeholder() {
        for lang in Lang::value_variants() {
            let files = render(*lang, "my-bandit");
            let contract = files
                .iter()
                .find(|(p, _)| p == Path::new("wit/adapter.wit"))
                .expect("the contract");
            assert_eq!(contract.1, CONTRACT);
            for (path, text) in &files {
                assert!(
                    !text.contains("__NAME__") && !text.contains("__CRATE__"),
                    "{}",
                    path.display()
                );
            }
        }
        let rust = render(Lang::Rust, "my-bandit");
        let manifest = &rust
            .iter()
            .find(|(p, _)| p == Path::new("Cargo.toml"))
            .unwrap()
            .1;
        assert!(manifest.contains("name = \"my-bandit\""), "{manifest}");
        let makefile = &rust
            .iter()
            .find(|(p, _)| p == Path::new("Makefile"))
            .unwrap()
            .1;
        assert!(makefile.contains(":= my_bandit\n"), "{makefile}");
    }
}
