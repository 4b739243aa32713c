//! Where an adapter author's tools (`adapter check`, `adapter run`, `dev`)
//! keep what they compile and build — compiled components, Python
//! environments: `host.cache_dir` when the configuration sets it, else the
//! user's cache directory (`$XDG_CACHE_HOME/trainyard`, by default
//! `~/.cache/trainyard`). Never the directory they run in: that is the
//! author's project, and a compiled component is tens of megabytes.

use crate::settings::{Origin, Settings, Source};
use etcetera::BaseStrategy;
use std::path::PathBuf;

/// The user's cache directory for trainyard, if the user has a home.
pub fn user_cache_dir() -> Option<PathBuf> {
    etcetera::choose_base_strategy()
        .ok()
        .map(|dirs| dirs.cache_dir().join("trainyard"))
}

/// The cache directory the tools use: the configured one, else `user`.
pub fn tools_cache_dir(
    configured: Option<PathBuf>,
    origin: Origin,
    user: Option<PathBuf>,
) -> Option<PathBuf> {
    match origin {
        Origin::Default => user,
        _ => configured,
    }
}

/// `settings` with the tools' cache directory in `host.cache_dir`.
pub fn for_tools(settings: &Settings, source: &Source) -> Settings {
    let mut settings = settings.clone();
    settings.host.cache_dir = tools_cache_dir(
        settings.host.cache_dir.take(),
        source.origin("host.cache_dir"),
        user_cache_dir(),
    );
    settings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tools_keep_their_cache_out_of_the_directory_they_run_in_unless_told() {
        let user = Some(PathBuf::from("/home/me/.cache/trainyard"));
        let default = Some(PathBuf::from("data/cache"));
        assert_eq!(
            tools_cache_dir(default.clone(), Origin::Default, user.clone()),
            user
        );
        let chosen = Some(PathBuf::from("/srv/cache"));
        assert_eq!(
            tools_cache_dir(chosen.clone(), Origin::File("c.toml".into()), user.clone()),
            chosen
        );
        assert_eq!(tools_cache_dir(default, Origin::Default, None), None);
    }
}
