//! Refusing, before anything runs, files that are not adapters of the
//! contract this host speaks: bytes that are not WebAssembly, core modules,
//! components built against another version of `trainyard:adapter`, and
//! adapters whose `describe` answer breaks the contract's rules.
//!
//! Everything here is a plain function over bytes, names and values, so the
//! rules are tested without an engine.

use super::bindings::wit;
use trainyard_proto::messages::AdapterInfo;

/// The contract versions this host accepts, as shown to operators.
pub const SUPPORTED: &str = "trainyard:adapter@0.1.x";
const PACKAGE: &str = "trainyard:adapter";
/// Semver-compatible versions of 0.1.0 start with this.
const COMPATIBLE_PREFIX: &str = "0.1";

/// Why a file's first bytes show it is not a component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderProblem {
    NotWasm,
    CoreModule,
    UnknownEncoding(String),
}

/// Checks the preamble: the `\0asm` magic, then the version and layer
/// fields, which tell a component (`0d 00 01 00`) from a core module
/// (`01 00 00 00`).
pub fn check_header(bytes: &[u8]) -> Result<(), HeaderProblem> {
    let Some((magic, rest)) = bytes.split_first_chunk::<4>() else {
        return Err(HeaderProblem::NotWasm);
    };
    if magic != b"\0asm" {
        return Err(HeaderProblem::NotWasm);
    }
    match rest.first_chunk::<4>() {
        None => Err(HeaderProblem::NotWasm),
        Some([0x01, 0x00, 0x00, 0x00]) => Err(HeaderProblem::CoreModule),
        Some([_, _, 0x01, 0x00]) => Ok(()),
        Some(other) => Err(HeaderProblem::UnknownEncoding(format!(
            "unknown WebAssembly version and layer fields {other:02x?}"
        ))),
    }
}

/// Why a component's imports and exports do not fit this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContractProblem {
    /// It uses `trainyard:adapter` at this incompatible version.
    WrongVersion(String),
    /// It does not export the adapter interface; these are its exports.
    NotAnAdapter(String),
}

/// Checks that every `trainyard:adapter` interface the component imports
/// or exports is at a compatible version, and that it exports the
/// `adapter` interface.
pub fn check_names<'a>(
    imports: impl IntoIterator<Item = &'a str>,
    exports: impl IntoIterator<Item = &'a str>,
) -> Result<(), ContractProblem> {
    let exports: Vec<&str> = exports.into_iter().collect();
    for name in imports.into_iter().chain(exports.iter().copied()) {
        if let Some((_, version)) = contract_interface(name) {
            if !compatible(version) {
                return Err(ContractProblem::WrongVersion(match version {
                    Some(v) => format!("{PACKAGE}@{v}"),
                    None => format!("an unversioned {PACKAGE}"),
                }));
            }
        }
    }
    let exports_adapter = exports
        .iter()
        .any(|name| matches!(contract_interface(name), Some(("adapter", _))));
    if exports_adapter {
        Ok(())
    } else {
        let listed = if exports.is_empty() {
            "nothing".to_owned()
        } else {
            exports.join(", ")
        };
        Err(ContractProblem::NotAnAdapter(listed))
    }
}

/// `trainyard:adapter/<interface>[@<version>]` split into its interface and
/// version; `None` for names of other packages.
fn contract_interface(name: &str) -> Option<(&str, Option<&str>)> {
    let rest = name.strip_prefix(PACKAGE)?.strip_prefix('/')?;
    Some(match rest.split_once('@') {
        Some((interface, version)) => (interface, Some(version)),
        None => (rest, None),
    })
}

fn compatible(version: Option<&str>) -> bool {
    version.is_some_and(|v| v == COMPATIBLE_PREFIX || v.starts_with("0.1."))
}

/// What a well-formed `describe` answer may hold.
const MAX_NAME: usize = 64;
const MAX_VERSION: usize = 64;
const MAX_DESCRIPTION: usize = 1 << 10;
const MAX_KINDS: usize = 32;
const MAX_KIND: usize = 64;

/// Checks an adapter's name: what tasks name it by.
pub fn check_adapter_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{:?} must be 1 to {MAX_NAME} lower-case letters, digits or '-'",
            shown(name)
        ))
    }
}

/// Checks an adapter's `describe` answer and splits it into what the
/// master is told (name, version, kinds) and the description.
pub fn check_info(info: wit::AdapterInfo) -> Result<(AdapterInfo, String), String> {
    check_adapter_name(&info.name).map_err(|e| format!("its name {e}"))?;
    if info.version.is_empty() || info.version.len() > MAX_VERSION || !printable(&info.version) {
        return Err(format!(
            "its version {:?} must be 1 to {MAX_VERSION} printable characters",
            shown(&info.version)
        ));
    }
    trainyard_proto::adapter_version::check_version(&info.version)
        .map_err(|e| format!("its version {e}: tasks pin versions by semver"))?;
    if info.description.len() > MAX_DESCRIPTION || info.description.chars().any(char::is_control) {
        return Err(format!(
            "its description must be one line of at most {MAX_DESCRIPTION} bytes"
        ));
    }
    if info.kinds.is_empty() || info.kinds.len() > MAX_KINDS {
        return Err(format!(
            "it names {} task kinds; an adapter serves 1 to {MAX_KINDS}",
            info.kinds.len()
        ));
    }
    for (i, kind) in info.kinds.iter().enumerate() {
        if kind.is_empty() || kind.len() > MAX_KIND || !printable(kind) || kind.contains(' ') {
            return Err(format!(
                "its task kind {:?} must be 1 to {MAX_KIND} printable characters without spaces",
                shown(kind)
            ));
        }
        if info.kinds[..i].contains(kind) {
            return Err(format!("it names the task kind {kind:?} twice"));
        }
    }
    let wit::AdapterInfo {
        name,
        version,
        description,
        kinds,
    } = info;
    Ok((
        AdapterInfo {
            name,
            version,
            kinds,
            ..AdapterInfo::default()
        },
        description,
    ))
}

fn printable(text: &str) -> bool {
    !text.chars().any(char::is_control)
}

/// A bad value cut to a size fit for an error message.
fn shown(text: &str) -> &str {
    super::guest_log::cut(text, 80)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_tell_components_from_modules_and_junk() {
        assert_eq!(check_header(b"\0asm\x0d\0\x01\0rest"), Ok(()));
        assert_eq!(
            check_header(b"\0asm\x01\0\0\0"),
            Err(HeaderProblem::CoreModule)
        );
        assert_eq!(
            check_header(b"\x7fELF\x02\x01\x01\0"),
            Err(HeaderProblem::NotWasm)
        );
        assert_eq!(check_header(b"\0as"), Err(HeaderProblem::NotWasm));
        assert_eq!(check_header(b"\0asm"), Err(HeaderProblem::NotWasm));
        assert!(matches!(
            check_header(b"\0asm\x02\0\0\0"),
            Err(HeaderProblem::UnknownEncoding(_))
        ));
    }

    #[test]
    fn compatible_versions_pass_and_others_are_named() {
        let imports = ["wasi:cli/environment@0.2.6", "trainyard:adapter/host@0.1.0"];
        assert_eq!(
            check_names(imports, ["trainyard:adapter/adapter@0.1.3"]),
            Ok(())
        );
        assert_eq!(
            check_names(
                ["trainyard:adapter/host@0.2.0"],
                ["trainyard:adapter/adapter@0.2.0"]
            ),
            Err(ContractProblem::WrongVersion(
                "trainyard:adapter@0.2.0".into()
            ))
        );
        assert_eq!(
            check_names([], ["trainyard:adapter/adapter@1.1.0"]),
            Err(ContractProblem::WrongVersion(
                "trainyard:adapter@1.1.0".into()
            ))
        );
        assert_eq!(
            check_names([], ["trainyard:adapter/adapter"]),
            Err(ContractProblem::WrongVersion(
                "an unversioned trainyard:adapter".into()
            ))
        );
    }

    #[test]
    fn a_component_without_the_adapter_export_is_not_an_adapter() {
        assert_eq!(
            check_names(["wasi:cli/stdout@0.2.0"], ["wasi:cli/run@0.2.0"]),
            Err(ContractProblem::NotAnAdapter("wasi:cli/run@0.2.0".into()))
        );
        assert_eq!(
            check_names([], []),
            Err(ContractProblem::NotAnAdapter("nothing".into()))
        );
    }

    fn info(name: &str, kinds: &[&str]) -> wit::AdapterInfo {
        wit::AdapterInfo {
            name: name.into(),
            version: "0.1.0".into(),
            description: "runs things".into(),
            kinds: kinds.iter().map(|k| k.to_string()).collect(),
        }
    }

    #[test]
    fn well_formed_info_is_split_into_what_the_master_sees() {
        let (info, description) = check_info(info("python-trainer", &["q-learning"])).unwrap();
        assert_eq!(info.name, "python-trainer");
        assert_eq!(info.kinds, ["q-learning"]);
        assert_eq!(description, "runs things");
    }

    #[test]
    fn malformed_info_is_refused_with_the_rule_it_broke() {
        let too_many: Vec<String> = (0..33).map(|i| format!("k{i}")).collect();
        let too_many: Vec<&str> = too_many.iter().map(String::as_str).collect();
        let cases = [
            (info("Hostile", &["a"]), "lower-case"),
            (info("", &["a"]), "lower-case"),
            (info(&"a".repeat(65), &["a"]), "lower-case"),
            (info("ok", &[]), "0 task kinds"),
            (info("ok", &too_many), "33 task kinds"),
            (info("ok", &["a", "a"]), "twice"),
            (info("ok", &[""]), "printable"),
            (info("ok", &["has space"]), "without spaces"),
            (
                wit::AdapterInfo {
                    version: "latest".into(),
                    ..info("ok", &["a"])
                },
                "not a semver version",
            ),
        ];
        for (info, expected) in cases {
            let problem = check_info(info).expect_err(expected);
            assert!(
                problem.contains(expected),
                "{problem:?} should mention {expected:?}"
            );
        }
        let mut long = info("ok", &["a"]);
        long.description = "d".repeat(2000);
        assert!(check_info(long).unwrap_err().contains("description"));
    }
}
