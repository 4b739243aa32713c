//! `trainyard tasks`: the newest tasks as a table (or JSON), filtered by
//! status or adapter.

use super::table::render_tasks_table;
use crate::client::ApiClient;
use trainyard_master::model::TaskStatus;

#[derive(Debug, Clone, clap::Args)]
pub struct TasksArgs {
    /// Only tasks in this status: PENDING, DISPATCHED, RUNNING, COMPLETED, FAILED or CANCELLED
    #[arg(long, value_parser = parse_status)]
    pub status: Option<TaskStatus>,
    /// Only tasks run by this adapter
    #[arg(long, value_name = "NAME")]
    pub adapter: Option<String>,
    /// Show at most this many (newest first)
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub limit: u32,
    /// Only tasks with ids below this one (to page back through older tasks)
    #[arg(long, value_name = "ID")]
    pub before: Option<u64>,
    /// Print the tasks as JSON instead of a table
    #[arg(long)]
    pub json: bool,
}

/// A status name, in any case.
pub fn parse_status(text: &str) -> Result<TaskStatus, String> {
    TaskStatus::parse(text).ok_or_else(|| {
        let all: Vec<&str> = TaskStatus::ALL.iter().map(|s| s.as_str()).collect();
        format!("unknown status {text:?}; use one of {}", all.join(", "))
    })
}

pub async fn run(client: &ApiClient, args: TasksArgs) -> anyhow::Result<()> {
    let tasks = client
        .tasks(
            args.status.map(TaskStatus::as_str),
            args.adapter.as_deref(),
            Some(args.limit),
            args.before,
        )
        .await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&tasks)?);
        return Ok(());
    }
    if tasks.is_empty() {
        println!(
            "no tasks{}",
            if args.status.is_some() || args.adapter.is_some() {
                " match"
            } else {
                ""
            }
        );
        return Ok(());
    }
    println!("{}", render_tasks_table(&tasks));
    if let (true, Some(oldest)) = (tasks.len() as u64 >= u64::from(args.limit), tasks.last()) {
        // On stderr, so a script reading the table does not see it.
        eprintln!(
            "(the newest {}; --before {} shows older ones)",
            args.limit, oldest.id
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_read_in_any_case_and_unknown_ones_list_the_choices() {
        assert_eq!(parse_status("running"), Ok(TaskStatus::Running));
        assert_eq!(parse_status("FAILED"), Ok(TaskStatus::Failed));
        assert_eq!(
            parse_status("done"),
            Err("unknown status \"done\"; use one of PENDING, DISPATCHED, RUNNING, COMPLETED, FAILED, CANCELLED".into())
        );
    }
}
