//! `trainyard watch`: live task progress from the event stream, one line per
//! event, for every task or only those named; with `--until-done` it ends
//! when they all have.

use super::follow::{self, Following, Watched};
use crate::client::ApiClient;
use anyhow::bail;
use trainyard_proto::TaskId;

#[derive(Debug, Clone, clap::Args)]
pub struct WatchArgs {
    /// Only these tasks [default: every task]
    #[arg(value_name = "IDS")]
    pub ids: Vec<TaskId>,
    /// Exit once every task named has ended: 0 if all COMPLETED, 1 otherwise
    #[arg(long, requires = "ids")]
    pub until_done: bool,
}

pub async fn run(client: &ApiClient, args: WatchArgs) -> anyhow::Result<()> {
    let mut watched = match args.ids.as_slice() {
        [] => Watched::everything(),
        ids => Watched::only(ids),
    };
    let how = Following {
        until_done: args.until_done,
        ..Following::default()
    };
    follow::follow(client, &mut watched, &how, None, &mut |line| {
        println!("{line}")
    })
    .await?;
    if let Some(shortfall) = watched.shortfall() {
        bail!(shortfall);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        watch: WatchArgs,
    }

    #[test]
    fn until_done_needs_the_tasks_to_wait_for() {
        assert!(Cli::try_parse_from(["watch", "--until-done"]).is_err());
        let cli = Cli::try_parse_from(["watch", "--until-done", "3", "4"]).unwrap();
        assert_eq!(cli.watch.ids, vec![3, 4]);
    }
}
