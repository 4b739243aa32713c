//! Checks an adapter's launch plan against the operator's policy before the
//! host acts on it.
//!
//! An adapter only *asks*: which files to write into the workspace and
//! which program to run. The host writes and runs nothing until the plan
//! passes [`validate`]: the bounds written in `wit/adapter.wit` (file count
//! and size, argument count and size, environment size and names, no NUL
//! bytes), workspace-relative file paths ([`check_relative_path`]), and the
//! program on the adapter's [`Allowlist`], spelled exactly as the operator
//! wrote it. The allowlist is resolved to executables once, when the adapter
//! is loaded, so a plan can never pick which file on `PATH` it gets.

use crate::runtime::LaunchPlan;
use std::ffi::OsStr;
use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

pub const MAX_FILES: usize = 64;
pub const MAX_FILE_BYTES: usize = 16 << 20;
pub const MAX_ARGS: usize = 1024;
pub const MAX_ARG_BYTES: usize = 1 << 20;
pub const MAX_ENV: usize = 256;
/// Not in the contract: the host's own bound on the environment's size.
/// `execve` fails past about 2 MiB of arguments and environment together.
pub const MAX_ENV_BYTES: usize = 1 << 20;
pub const MAX_PATH_BYTES: usize = 4096;

/// The programs an adapter may launch: each name as the operator spelled it,
/// with the executable it was resolved to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowlist {
    /// In the operator's order, for messages.
    entries: Vec<(String, PathBuf)>,
}

/// An allowlist entry that cannot be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowlistError {
    #[error("allowed program {program:?} is not a bare name or an absolute path")]
    NotBareOrAbsolute { program: String },
    #[error("allowed program {program:?} was not found on PATH ({search_path})")]
    NotOnPath {
        program: String,
        search_path: String,
    },
    #[error("allowed program {program:?} cannot be looked up: the host has no PATH")]
    NoPath { program: String },
    #[error("allowed program {program:?} does not exist")]
    Missing { program: String },
    #[error("allowed program {program:?} is not an executable file")]
    NotExecutable { program: String },
}

impl Allowlist {
    /// Bare names are looked up in `search_path` (the host's PATH) when the
    /// adapter is loaded; absolute paths must exist and be executable. A
    /// missing program is an error naming it.
    pub fn resolve(
        programs: &[String],
        search_path: Option<&OsStr>,
    ) -> Result<Allowlist, AllowlistError> {
        let entries = programs
            .iter()
            .map(|program| Ok((program.clone(), resolve_one(program, search_path)?)))
            .collect::<Result<_, AllowlistError>>()?;
        Ok(Allowlist { entries })
    }

    /// The programs, as the operator spelled them.
    pub fn names(&self) -> Vec<String> {
        self.entries.iter().map(|(name, _)| name.clone()).collect()
    }

    /// The executable for a program spelled exactly as on the list.
    pub fn executable(&self, program: &str) -> Option<&Path> {
        self.entries
            .iter()
            .find(|(name, _)| name == program)
            .map(|(_, path)| path.as_path())
    }
}

fn resolve_one(program: &str, search_path: Option<&OsStr>) -> Result<PathBuf, AllowlistError> {
    let path = Path::new(program);
    if path.is_absolute() {
        return match std::fs::metadata(path) {
            Err(_) => Err(AllowlistError::Missing {
                program: program.to_owned(),
            }),
            Ok(meta) if is_executable(&meta) => Ok(path.to_path_buf()),
            Ok(_) => Err(AllowlistError::NotExecutable {
                program: program.to_owned(),
            }),
        };
    }
    if program.is_empty() || program.contains('/') || program.contains('\0') {
        return Err(AllowlistError::NotBareOrAbsolute {
            program: program.to_owned(),
        });
    }
    let search_path = search_path.ok_or_else(|| AllowlistError::NoPath {
        program: program.to_owned(),
    })?;
    std::env::split_paths(search_path)
        // An empty PATH entry means the current directory: never for a host.
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|candidate| std::fs::metadata(candidate).is_ok_and(|meta| is_executable(&meta)))
        .ok_or_else(|| AllowlistError::NotOnPath {
            program: program.to_owned(),
            search_path: search_path.to_string_lossy().into_owned(),
        })
}

fn is_executable(meta: &std::fs::Metadata) -> bool {
    meta.is_file() && meta.permissions().mode() & 0o111 != 0
}

/// A plan that passed [`validate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidPlan {
    pub files: Vec<PlannedFile>,
    pub command: Option<ValidCommand>,
}

/// A file to write into the workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedFile {
    /// Checked by [`check_relative_path`].
    pub path: String,
    pub contents: Vec<u8>,
}

/// The program to run, resolved through the allowlist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidCommand {
    /// As the adapter asked for it (and the operator allowed it).
    pub program: String,
    pub executable: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// Why a plan was refused. Messages say what was asked and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("the launch plan writes {count} files (limit {MAX_FILES})")]
    TooManyFiles { count: usize },
    #[error(
        "the launch plan's files hold {bytes} bytes in total (limit {MAX_FILE_BYTES}, 16 MiB)"
    )]
    FilesTooLarge { bytes: usize },
    #[error("the launch plan writes a file at {path:?}, which is refused: {problem}")]
    BadFilePath { path: String, problem: PathProblem },
    #[error("adapter asked to launch {program:?}, which is not on its allowlist [{}]", allowed.join(", "))]
    NotAllowed {
        program: String,
        allowed: Vec<String>,
    },
    #[error("the launch plan passes {count} arguments (limit {MAX_ARGS})")]
    TooManyArgs { count: usize },
    #[error(
        "the launch plan's arguments hold {bytes} bytes in total (limit {MAX_ARG_BYTES}, 1 MiB)"
    )]
    ArgsTooLarge { bytes: usize },
    #[error("the launch plan sets {count} environment variables (limit {MAX_ENV})")]
    TooManyEnv { count: usize },
    #[error(
        "the launch plan's environment holds {bytes} bytes in total (limit {MAX_ENV_BYTES}, 1 MiB)"
    )]
    EnvTooLarge { bytes: usize },
    #[error(
        "the launch plan sets an environment variable named {name:?}; names are ASCII letters, \
         digits and '_', not starting with a digit"
    )]
    BadEnvName { name: String },
    #[error("the launch plan's {what} contains a NUL byte")]
    Nul { what: String },
}

/// Checks `plan` against the contract's bounds and the allowlist.
pub fn validate(plan: LaunchPlan, allowlist: &Allowlist) -> Result<ValidPlan, PlanError> {
    if plan.files.len() > MAX_FILES {
        return Err(PlanError::TooManyFiles {
            count: plan.files.len(),
        });
    }
    let bytes: usize = plan.files.iter().map(|f| f.contents.len()).sum();
    if bytes > MAX_FILE_BYTES {
        return Err(PlanError::FilesTooLarge { bytes });
    }
    let files = plan
        .files
        .into_iter()
        .map(|file| match check_relative_path(&file.path) {
            Ok(_) => Ok(PlannedFile {
                path: file.path,
                contents: file.contents,
            }),
            Err(problem) => Err(PlanError::BadFilePath {
                path: shown(&file.path),
                problem,
            }),
        })
        .collect::<Result<_, _>>()?;
    let command = plan
        .command
        .map(|c| validate_command(c, allowlist))
        .transpose()?;
    Ok(ValidPlan { files, command })
}

fn validate_command(
    command: crate::runtime::PlanCommand,
    allowlist: &Allowlist,
) -> Result<ValidCommand, PlanError> {
    let Some(executable) = allowlist.executable(&command.program) else {
        return Err(PlanError::NotAllowed {
            program: shown(&command.program),
            allowed: allowlist.names(),
        });
    };
    if command.args.len() > MAX_ARGS {
        return Err(PlanError::TooManyArgs {
            count: command.args.len(),
        });
    }
    let bytes: usize = command.args.iter().map(String::len).sum();
    if bytes > MAX_ARG_BYTES {
        return Err(PlanError::ArgsTooLarge { bytes });
    }
    if let Some(i) = command.args.iter().position(|a| a.contains('\0')) {
        return Err(PlanError::Nul {
            what: format!("argument {}", i + 1),
        });
    }
    if command.env.len() > MAX_ENV {
        return Err(PlanError::TooManyEnv {
            count: command.env.len(),
        });
    }
    let bytes: usize = command
        .env
        .iter()
        .map(|v| v.name.len() + v.value.len())
        .sum();
    if bytes > MAX_ENV_BYTES {
        return Err(PlanError::EnvTooLarge { bytes });
    }
    let mut env = Vec::with_capacity(command.env.len());
    for var in command.env {
        if !valid_env_name(&var.name) {
            return Err(PlanError::BadEnvName {
                name: shown(&var.name),
            });
        }
        if var.value.contains('\0') {
            return Err(PlanError::Nul {
                what: format!("value of environment variable {}", var.name),
            });
        }
        env.push((var.name, var.value));
    }
    Ok(ValidCommand {
        program: command.program,
        executable: executable.to_path_buf(),
        args: command.args,
        env,
    })
}

fn valid_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A value from an adapter, cut to a size fit for an error message.
fn shown(text: &str) -> String {
    let mut end = text.len().min(200);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Why a workspace-relative path was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathProblem {
    Empty,
    TooLong {
        bytes: usize,
    },
    Nul,
    Absolute,
    Parent,
    /// Only `.` and empty components: it names the workspace itself.
    NoFileName,
}

impl fmt::Display for PathProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathProblem::Empty => f.write_str("the path is empty"),
            PathProblem::TooLong { bytes } => {
                write!(f, "the path is {bytes} bytes long (limit {MAX_PATH_BYTES})")
            }
            PathProblem::Nul => f.write_str("the path contains a NUL byte"),
            PathProblem::Absolute => {
                f.write_str("the path is absolute; it must be relative to the workspace")
            }
            PathProblem::Parent => {
                f.write_str("the path contains `..`, which could leave the workspace")
            }
            PathProblem::NoFileName => {
                f.write_str("the path names the workspace itself, not a file in it")
            }
        }
    }
}

impl std::error::Error for PathProblem {}

/// Checks a workspace-relative path: not empty, not absolute, no `..`, no
/// NUL, at least one component left once empty and `.` components are
/// dropped, at most 4096 bytes. Shared with checkpoint handling.
pub fn check_relative_path(path: &str) -> Result<&str, PathProblem> {
    if path.is_empty() {
        return Err(PathProblem::Empty);
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(PathProblem::TooLong { bytes: path.len() });
    }
    if path.contains('\0') {
        return Err(PathProblem::Nul);
    }
    if path.starts_with('/') {
        return Err(PathProblem::Absolute);
    }
    let mut named = 0;
    for component in path.split('/') {
        match component {
            "" | "." => {}
            ".." => return Err(PathProblem::Parent),
            _ => named += 1,
        }
    }
    if named == 0 {
        return Err(PathProblem::NoFileName);
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{EnvVar, PlanCommand, PlanFile};

    /// An allowlist with `python3` resolved from a PATH holding a fake one.
    fn python_only() -> (tempfile::TempDir, Allowlist) {
        let dir = tempfile::tempdir().unwrap();
        let python = dir.path().join("python3");
        std::fs::write(&python, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        let list = Allowlist::resolve(&["python3".into()], Some(dir.path().as_os_str())).unwrap();
        (dir, list)
    }

    fn plan(program: &str, args: Vec<String>, env: Vec<(&str, &str)>) -> LaunchPlan {
        LaunchPlan {
            files: vec![],
            command: Some(PlanCommand {
                program: program.into(),
                args,
                env: env
                    .into_iter()
                    .map(|(name, value)| EnvVar {
                        name: name.into(),
                        value: value.into(),
                    })
                    .collect(),
            }),
        }
    }

    fn files(files: Vec<(&str, usize)>) -> LaunchPlan {
        LaunchPlan {
            files: files
                .into_iter()
                .map(|(path, size)| PlanFile {
                    path: path.into(),
                    contents: vec![b'x'; size],
                })
                .collect(),
            command: None,
        }
    }

    #[test]
    fn an_allowed_program_resolves_to_the_executable_found_at_load() {
        let (dir, list) = python_only();
        let valid = validate(
            plan("python3", vec!["-u".into()], vec![("SEED", "1")]),
            &list,
        )
        .unwrap();
        let command = valid.command.unwrap();
        assert_eq!(command.executable, dir.path().join("python3"));
        assert_eq!(command.program, "python3");
        assert_eq!(command.env, [("SEED".to_string(), "1".to_string())]);
    }

    #[test]
    fn only_the_exact_spelling_on_the_allowlist_is_accepted() {
        let (_dir, list) = python_only();
        for program in [
            "sh",
            "/usr/bin/python3",
            "/bin/sh",
            "curl",
            "python3 ",
            "./python3",
            "",
        ] {
            let refused = validate(plan(program, vec![], vec![]), &list).unwrap_err();
            assert_eq!(
                refused,
                PlanError::NotAllowed {
                    program: program.into(),
                    allowed: vec!["python3".into()]
                }
            );
        }
        assert_eq!(
            validate(plan("sh", vec![], vec![]), &list)
                .unwrap_err()
                .to_string(),
            r#"adapter asked to launch "sh", which is not on its allowlist [python3]"#
        );
    }

    #[test]
    fn resolving_names_the_missing_program() {
        let dir = tempfile::tempdir().unwrap();
        let err = Allowlist::resolve(&["nope-not-here".into()], Some(dir.path().as_os_str()))
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("\"nope-not-here\" was not found on PATH"),
            "{err}"
        );
        let err = Allowlist::resolve(&["/no/such/program".into()], None).unwrap_err();
        assert_eq!(
            err,
            AllowlistError::Missing {
                program: "/no/such/program".into()
            }
        );
        let err = Allowlist::resolve(&["bin/python3".into()], None).unwrap_err();
        assert!(matches!(err, AllowlistError::NotBareOrAbsolute { .. }));
        let not_exec = dir.path().join("data");
        std::fs::write(&not_exec, "x").unwrap();
        let err = Allowlist::resolve(&[not_exec.display().to_string()], None).unwrap_err();
        assert!(matches!(err, AllowlistError::NotExecutable { .. }));
        let err = Allowlist::resolve(&["python3".into()], None).unwrap_err();
        assert!(matches!(err, AllowlistError::NoPath { .. }));
    }

    #[test]
    fn absolute_entries_are_allowed_when_spelled_absolutely() {
        let list = Allowlist::resolve(&["/bin/sh".into()], None).unwrap();
        assert_eq!(list.names(), ["/bin/sh"]);
        assert!(validate(plan("/bin/sh", vec![], vec![]), &list).is_ok());
        assert!(validate(plan("sh", vec![], vec![]), &list).is_err());
    }

    #[test]
    fn plans_over_the_contract_bounds_are_refused() {
        let (_dir, list) = python_only();
        let many_args = (0..1025).map(|i| i.to_string()).collect();
        assert_eq!(
            validate(plan("python3", many_args, vec![]), &list),
            Err(PlanError::TooManyArgs { count: 1025 })
        );
        let fat_args = vec!["a".repeat(600 << 10), "b".repeat(600 << 10)];
        assert!(matches!(
            validate(plan("python3", fat_args, vec![]), &list),
            Err(PlanError::ArgsTooLarge { .. })
        ));
        let names: Vec<String> = (0..257).map(|i| format!("V{i}")).collect();
        let env = names.iter().map(|n| (n.as_str(), "x")).collect();
        assert_eq!(
            validate(plan("python3", vec![], env), &list),
            Err(PlanError::TooManyEnv { count: 257 })
        );
        let many_files = (0..65).map(|_| ("f", 1)).collect();
        assert_eq!(
            validate(files(many_files), &list),
            Err(PlanError::TooManyFiles { count: 65 })
        );
        assert_eq!(
            validate(files(vec![("a", 10 << 20), ("b", 7 << 20)]), &list),
            Err(PlanError::FilesTooLarge { bytes: 17 << 20 })
        );
        assert!(validate(files(vec![("a", 8 << 20), ("b", 8 << 20)]), &list).is_ok());
    }

    #[test]
    fn env_names_and_nul_bytes_are_checked() {
        let (_dir, list) = python_only();
        for bad in ["1BAD", "A=B", "", "A-B", "É"] {
            assert!(
                matches!(
                    validate(plan("python3", vec![], vec![(bad, "x")]), &list),
                    Err(PlanError::BadEnvName { .. })
                ),
                "{bad:?}"
            );
        }
        assert!(validate(plan("python3", vec![], vec![("_OK_1", "x")]), &list).is_ok());
        assert_eq!(
            validate(
                plan("python3", vec!["ok".into(), "a\0b".into()], vec![]),
                &list
            ),
            Err(PlanError::Nul {
                what: "argument 2".into()
            })
        );
        assert!(matches!(
            validate(plan("python3", vec![], vec![("A", "x\0y")]), &list),
            Err(PlanError::Nul { .. })
        ));
    }

    #[test]
    fn file_paths_must_stay_in_the_workspace() {
        let (_dir, list) = python_only();
        for (path, problem) in [
            ("../escape", PathProblem::Parent),
            ("a/../../b", PathProblem::Parent),
            ("/etc/passwd", PathProblem::Absolute),
            ("", PathProblem::Empty),
            (".", PathProblem::NoFileName),
            ("./", PathProblem::NoFileName),
            ("a\0b", PathProblem::Nul),
        ] {
            assert_eq!(check_relative_path(path), Err(problem), "{path:?}");
            assert!(matches!(
                validate(files(vec![(path, 1)]), &list),
                Err(PlanError::BadFilePath { .. })
            ));
        }
        assert_eq!(
            check_relative_path(&"a".repeat(4097)),
            Err(PathProblem::TooLong { bytes: 4097 })
        );
        for ok in ["trainer.py", "ckpt/q.json", "./a//b", "a.b/..c"] {
            assert_eq!(check_relative_path(ok), Ok(ok));
        }
    }
}
