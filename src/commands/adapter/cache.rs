//! Where an adapter author's tools (`adapter check`, `adapter run`, `dev`)
//! keep the components they compile: `host.adapter_cache_dir` or
//! `host.cache_dir` when the configuration sets one, else the user's cache
//! directory (`$XDG_CACHE_HOME/trainyard/adapters`, by default
//! `~/.cache/trainyard/adapters`). Never the directory they run in: that is
//! the author's project, and a compiled component is tens of megabytes.
//!
//! Python environments (`adapter run --requirements`) stay in
//! `host.cache_dir`: the trainer runs as an unprivileged user, who must
//! reach its interpreter, and cannot reach into a home directory.

use crate::settings::{Origin, Settings, Source};
use etcetera::BaseStrategy;
use std::path::PathBuf;

/// The user's cache directory for compiled adapters, if the user has a home.
pub fn user_adapter_cache() -> Option<PathBuf> {
    etcetera::choose_base_strategy()
        .ok()
        .map(|dirs| dirs.cache_dir().join("trainyard").join("adapters"))
}

/// Where the tools keep compiled adapters (`host.adapter_cache_dir`): as
/// configured when either cache setting is (`None` then leaves them to
/// `host.cache_dir`), else `user` (`None`: compiled every time).
pub fn tools_adapter_cache(
    adapter_cache: Option<PathBuf>,
    adapter_cache_origin: Origin,
    cache_origin: Origin,
    user: Option<PathBuf>,
) -> Option<PathBuf> {
    let configured = |origin: &Origin| !matches!(origin, Origin::Default);
    if configured(&adapter_cache_origin) || configured(&cache_origin) {
        adapter_cache
    } else {
        user
    }
}

/// `settings` with the tools' place for compiled adapters in
/// `host.adapter_cache_dir`.
pub fn for_tools(settings: &Settings, source: &Source) -> Settings {
    let mut settings = settings.clone();
    settings.host.adapter_cache_dir = tools_adapter_cache(
        settings.host.adapter_cache_dir.take(),
        source.origin("host.adapter_cache_dir"),
        source.origin("host.cache_dir"),
        user_adapter_cache(),
    );
    settings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tools_keep_compiled_adapters_out_of_the_directory_they_run_in_unless_told() {
        let user = Some(PathBuf::from("/home/me/.cache/trainyard/adapters"));
        let file = || Origin::File("config.toml".into());
        let unset = || Origin::Default;
        assert_eq!(
            tools_adapter_cache(None, unset(), unset(), user.clone()),
            user,
            "nothing configured: the user's cache"
        );
        assert_eq!(
            tools_adapter_cache(None, unset(), file(), user.clone()),
            None,
            "host.cache_dir configured: left to it"
        );
        let compiled = Some(PathBuf::from("/srv/compiled"));
        assert_eq!(
            tools_adapter_cache(compiled.clone(), file(), unset(), user.clone()),
            compiled
        );
        assert_eq!(
            tools_adapter_cache(None, unset(), unset(), None),
            None,
            "no home: compiled each time, never into the project"
        );
    }
}
