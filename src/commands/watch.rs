//! `trainyard watch`: live task progress from the event stream, one line per
//! event, for every task or only those named. Tasks named are shown first as
//! they are, and the watch ends once every one has ended (at once, with
//! their final state, for tasks that had ended already); `--until-done`
//! also makes the exit status say whether they all completed.

use super::follow::{self, Following, Watched};
use crate::client::ApiClient;
use anyhow::bail;
use trainyard_proto::TaskId;

#[derive(Debug, Clone, clap::Args)]
pub struct WatchArgs {
    /// Only these tasks [default: every task]
    #[arg(value_name = "IDS")]
    pub ids: Vec<TaskId>,
    /// Exit 1 unless every task named COMPLETED (watching tasks by id always
    /// ends once they have all ended)
    #[arg(long, requires = "ids")]
    pub until_done: bool,
}

pub async fn run(client: &ApiClient, args: WatchArgs) -> anyhow::Result<()> {
    let mut watched = match args.ids.as_slice() {
        [] => Watched::everything(),
        ids => Watched::only(ids),
    };
    // Named tasks that have all ended have nothing more to show.
    let how = Following {
        until_done: !args.ids.is_empty(),
        ..Following::default()
    };
    follow::follow(client, &mut watched, &how, None, &mut |line| {
        println!("{line}")
    })
    .await?;
    match watched.shortfall() {
        Some(shortfall) if args.until_done => bail!(shortfall),
        _ => Ok(()),
    }
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
