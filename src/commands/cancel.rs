//! `trainyard cancel`: cancels a task and says what happened — cancelled at
//! once (it was queued), or its host told to stop it.

use crate::client::ApiClient;
use serde_json::Value;

#[derive(Debug, Clone, clap::Args)]
pub struct CancelArgs {
    /// The task to cancel
    #[arg(value_name = "ID")]
    pub id: u64,
}

/// What the master's answer to a cancel means, in a sentence.
pub fn outcome(id: u64, answer: &Value) -> String {
    if answer["cancel_requested"] == Value::Bool(true) {
        format!("cancellation of task {id} requested; its host is stopping it")
    } else if answer["status"] == "CANCELLED" {
        format!("task {id} cancelled")
    } else {
        format!("task {id}: the master answered {answer}")
    }
}

pub async fn run(client: &ApiClient, args: CancelArgs) -> anyhow::Result<()> {
    let answer = client.cancel(args.id).await?;
    println!("{}", outcome(args.id, &answer));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_answer_says_whether_the_task_is_already_cancelled() {
        assert_eq!(
            outcome(7, &json!({"id": 7, "status": "CANCELLED"})),
            "task 7 cancelled"
        );
        assert_eq!(
            outcome(
                7,
                &json!({"id": 7, "status": "RUNNING", "cancel_requested": true})
            ),
            "cancellation of task 7 requested; its host is stopping it"
        );
    }
}
