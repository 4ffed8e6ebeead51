//! A turn's state and its tool calls: what a `tool` event reports, a snapshot folds and a turn's
//! status says.

use serde::{Deserialize, Serialize};

/// A tool call as reported by a `tool` event, and as folded into a snapshot (latest status wins).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub call_id: String,
    pub name: String,
    pub status: ToolStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_preview: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_preview: Option<String>,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    Started,
    Progress,
    Finished,
    Failed,
}

impl ToolStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolStatus::Started => "started",
            ToolStatus::Progress => "progress",
            ToolStatus::Finished => "finished",
            ToolStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "started" => ToolStatus::Started,
            "progress" => ToolStatus::Progress,
            "finished" => ToolStatus::Finished,
            "failed" => ToolStatus::Failed,
            _ => return None,
        })
    }
}

/// Where a turn is in its life. Exactly one `turn_ended` moves it to a terminal state.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnState {
    Queued,
    Running,
    /// Waiting for answers to the agent's requests (v1.2); in flight like `running`, holding
    /// nothing. A client that does not know it treats it as `running`.
    Waiting,
    Completed,
    Cancelled,
    Failed,
    Interrupted,
}

impl TurnState {
    pub fn as_str(self) -> &'static str {
        match self {
            TurnState::Queued => "queued",
            TurnState::Running => "running",
            TurnState::Waiting => "waiting",
            TurnState::Completed => "completed",
            TurnState::Cancelled => "cancelled",
            TurnState::Failed => "failed",
            TurnState::Interrupted => "interrupted",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "queued" => TurnState::Queued,
            "running" => TurnState::Running,
            "waiting" => TurnState::Waiting,
            "completed" => TurnState::Completed,
            "cancelled" => TurnState::Cancelled,
            "failed" => TurnState::Failed,
            "interrupted" => TurnState::Interrupted,
            _ => return None,
        })
    }

    pub fn is_terminal(self) -> bool {
        !matches!(
            self,
            TurnState::Queued | TurnState::Running | TurnState::Waiting
        )
    }
}

/// Merges a tool update into a list of calls: the latest status wins, a preview is kept until replaced.
pub fn merge_tool(tools: &mut Vec<ToolCall>, call: &ToolCall) {
    match tools.iter_mut().find(|t| t.call_id == call.call_id) {
        Some(existing) => {
            existing.status = call.status;
            if !call.name.is_empty() {
                existing.name.clone_from(&call.name);
            }
            if call.input_preview.is_some() {
                existing.input_preview.clone_from(&call.input_preview);
            }
            if call.output_preview.is_some() {
                existing.output_preview.clone_from(&call.output_preview);
            }
        }
        None => tools.push(call.clone()),
    }
}
