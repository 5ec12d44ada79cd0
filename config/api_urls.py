"""REST API v1 routes, mounted at `/api/v1/`: tasks, human decisions, admin
(tools, agents, secrets, webhooks), schedules, the OpenAPI 3 schema and its
browsable docs. Paths have no trailing slash; anything unmatched is a JSON 404
in the API's error shape."""

from __future__ import annotations

from django.urls import path, re_path, register_converter
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from accounts_app.api import api_keys, members, secrets
from approvals_app.api import inbox
from approvals_app.api import policy as approval_policy
from approvals_app.api import views as decisions
from audit_app.api import AuditListView
from evals_app.api import views as evaluations
from foundations import api_schema  # noqa: F401 - registers the Token auth scheme with drf-spectacular
from foundations.api_base import IdConverter, NameConverter
from foundations.api_errors import api_not_found
from memory_app import api as memory
from notify_app.api import slack
from notify_app.api import views as notify
from retention_app import api as retention
from schedules_app.api import views as schedules
from tasks_app.api import agent_versions, agents, resource_leases, retries
from tasks_app.api import stream as task_stream
from tasks_app.api import views as tasks
from tools_app.api import breakers
from tools_app.api import mcp_views as mcp
from tools_app.api import views as tools
from workflows_app.api import views as workflows

register_converter(IdConverter, "id")
register_converter(NameConverter, "name")

urlpatterns = [
    path("retention", retention.RetentionView.as_view(), name="api-retention"),
    path("archives", retention.ArchiveListView.as_view(), name="api-archives"),
    path("erasures", retention.ErasureView.as_view(), name="api-erasures"),
    path("exports", retention.ExportListView.as_view(), name="api-exports"),
    path("exports/<id:export_id>", retention.ExportDetailView.as_view(), name="api-export"),
    path("exports/<id:export_id>/download", retention.ExportDownloadView.as_view(),
         name="api-export-download"),
    path("tasks", tasks.TaskListView.as_view(), name="api-tasks"),
    path("tasks/batch", tasks.TaskBatchView.as_view(), name="api-tasks-batch"),
    path("tasks/bulk-cancel", tasks.TaskBulkCancelView.as_view(), name="api-tasks-bulk-cancel"),
    path("tasks/bulk-retry", retries.TaskBulkRetryView.as_view(), name="api-tasks-bulk-retry"),
    path("tasks/<id:task_id>", tasks.TaskDetailView.as_view(), name="api-task"),
    path("tasks/<id:task_id>/retry", retries.TaskRetryView.as_view(), name="api-task-retry"),
    path("leases", resource_leases.LeaseListView.as_view(), name="api-leases"),
    path("tasks/<id:task_id>/steps", tasks.TaskStepsView.as_view(), name="api-task-steps"),
    path("tasks/<id:task_id>/events", tasks.TaskEventsView.as_view(), name="api-task-events"),
    path("tasks/<id:task_id>/stream", task_stream.TaskStreamView.as_view(),
         name="api-task-stream"),
    path(
        "tasks/<id:task_id>/summaries", tasks.TaskSummariesView.as_view(), name="api-task-summaries"
    ),
    path(
        "tasks/<id:task_id>/summaries/<id:version>/rollback",
        tasks.TaskSummaryRollbackView.as_view(),
        name="api-task-summary-rollback",
    ),
    path("tasks/<id:task_id>/cancel", tasks.TaskCancelView.as_view(), name="api-task-cancel"),
    path("tasks/<id:task_id>/input", tasks.TaskInputView.as_view(), name="api-task-input"),
    path("tasks/<id:task_id>/resume", tasks.TaskResumeView.as_view(), name="api-task-resume"),
    path("tasks/<id:task_id>/fail", tasks.TaskFailView.as_view(), name="api-task-fail"),
    path(
        "tasks/<id:task_id>/approvals/decide-all",
        decisions.TaskApprovalsDecideAllView.as_view(),
        name="api-task-approvals-decide-all",
    ),
    path("approvals", decisions.ApprovalListView.as_view(), name="api-approvals"),
    path("approvals/<id:approval_id>", decisions.ApprovalDetailView.as_view(), name="api-approval"),
    path(
        "approvals/<id:approval_id>/approve",
        decisions.ApprovalApproveView.as_view(),
        name="api-approval-approve",
    ),
    path(
        "approvals/<id:approval_id>/reassign",
        decisions.ApprovalReassignView.as_view(),
        name="api-approval-reassign",
    ),
    path("approval-rules", approval_policy.RuleListView.as_view(), name="api-approval-rules"),
    path("approval-rules/<name:name>", approval_policy.RuleDetailView.as_view(),
         name="api-approval-rule"),
    path("reviewer-groups", approval_policy.GroupListView.as_view(), name="api-reviewer-groups"),
    path("reviewer-groups/<name:name>", approval_policy.GroupDetailView.as_view(),
         name="api-reviewer-group"),
    re_path(r"^scopes/(?P<name>[A-Za-z0-9_.@+-]{1,150})$", approval_policy.ScopeView.as_view(),
            name="api-scope"),
    path(
        "approvals/<id:approval_id>/reject",
        decisions.ApprovalRejectView.as_view(),
        name="api-approval-reject",
    ),
    path(
        "approvals/<id:approval_id>/respond",
        decisions.ApprovalRespondView.as_view(),
        name="api-approval-respond",
    ),
    path("reconciliations", decisions.ReconciliationListView.as_view(), name="api-reconciliations"),
    path(
        "reconciliations/<id:rec_id>",
        decisions.ReconciliationDetailView.as_view(),
        name="api-reconciliation",
    ),
    path(
        "reconciliations/<id:rec_id>/resolve",
        decisions.ReconciliationResolveView.as_view(),
        name="api-reconciliation-resolve",
    ),
    path(
        "reconciliations/<id:rec_id>/requery",
        decisions.ReconciliationRequeryView.as_view(),
        name="api-reconciliation-requery",
    ),
    path("questions", decisions.QuestionListView.as_view(), name="api-questions"),
    path("tools", tools.ToolListView.as_view(), name="api-tools"),
    path("tools/<name:name>", tools.ToolDetailView.as_view(), name="api-tool"),
    path("mcp-servers", mcp.McpServerListView.as_view(), name="api-mcp-servers"),
    path("mcp-servers/<name:name>", mcp.McpServerDetailView.as_view(), name="api-mcp-server"),
    path("mcp-servers/<name:name>/refresh", mcp.McpServerRefreshView.as_view(),
         name="api-mcp-server-refresh"),
    path("breakers", breakers.BreakerListView.as_view(), name="api-breakers"),
    path("workflows", workflows.WorkflowListView.as_view(), name="api-workflows"),
    path("workflows/<name:name>", workflows.WorkflowDetailView.as_view(), name="api-workflow"),
    path("workflows/<name:name>/versions", workflows.WorkflowVersionsView.as_view(),
         name="api-workflow-versions"),
    path("agents", agents.AgentListView.as_view(), name="api-agents"),
    path("agents/<name:name>", agents.AgentDetailView.as_view(), name="api-agent"),
    path("secrets", secrets.SecretListView.as_view(), name="api-secrets"),
    path("secrets/<name:name>", secrets.SecretDetailView.as_view(), name="api-secret"),
    path(
        "agents/<name:name>/versions",
        agent_versions.AgentVersionListView.as_view(),
        name="api-agent-versions",
    ),
    path(
        "agents/<name:name>/versions/<id:number>",
        agent_versions.AgentVersionDetailView.as_view(),
        name="api-agent-version",
    ),
    path(
        "agents/<name:name>/releases",
        agent_versions.AgentReleaseLogView.as_view(),
        name="api-agent-releases",
    ),
    path(
        "agents/<name:name>/promote",
        agent_versions.AgentPromoteView.as_view(),
        name="api-agent-promote",
    ),
    path(
        "agents/<name:name>/rollback",
        agent_versions.AgentRollbackView.as_view(),
        name="api-agent-rollback",
    ),
    path("webhooks", notify.WebhookListView.as_view(), name="api-webhooks"),
    path("webhooks/<id:webhook_id>", notify.WebhookDetailView.as_view(), name="api-webhook"),
    path(
        "webhooks/<id:webhook_id>/deliveries",
        notify.WebhookDeliveriesView.as_view(),
        name="api-webhook-deliveries",
    ),
    path(
        "notifications/email", notify.EmailSettingsView.as_view(), name="api-notifications-email"
    ),
    path("notifications/slack", notify.SlackSettingsView.as_view(),
         name="api-notifications-slack"),
    path("slack/<slug:tenant>/interactions", slack.slack_interactions,
         name="api-slack-interactions"),
    path("inbox", inbox.InboxView.as_view(), name="api-inbox"),
    path("members", members.MemberListView.as_view(), name="api-members"),
    path("members/<id:user_id>", members.MemberDetailView.as_view(), name="api-member"),
    path("api-keys", api_keys.ApiKeyListView.as_view(), name="api-keys"),
    path("api-keys/<id:key_id>", api_keys.ApiKeyDetailView.as_view(), name="api-key"),
    path("audit", AuditListView.as_view(), name="api-audit"),
    path("evaluations", evaluations.EvaluationListView.as_view(), name="api-evaluations"),
    path("evaluations/<id:evaluation_id>", evaluations.EvaluationDetailView.as_view(),
         name="api-evaluation"),
    path("evaluations/<id:evaluation_id>/tasks", evaluations.EvaluationTasksView.as_view(),
         name="api-evaluation-tasks"),
    path("evaluations/<id:evaluation_id>/tasks/<id:task_id>/compare",
         evaluations.EvaluationCompareView.as_view(), name="api-evaluation-task-compare"),
    path("memory", memory.MemoryListView.as_view(), name="api-memory"),
    path("memory/proposals", memory.ProposalListView.as_view(), name="api-memory-proposals"),
    path("memory/proposals/<id:proposal_id>/accept", memory.ProposalAcceptView.as_view(),
         name="api-memory-proposal-accept"),
    path("memory/proposals/<id:proposal_id>/reject", memory.ProposalRejectView.as_view(),
         name="api-memory-proposal-reject"),
    path("memory/<id:item_id>", memory.MemoryDetailView.as_view(), name="api-memory-item"),
    path("memory/<id:item_id>/versions", memory.MemoryVersionsView.as_view(),
         name="api-memory-versions"),
    path("memory/<id:item_id>/versions/<id:version>", memory.MemoryVersionView.as_view(),
         name="api-memory-version"),
    path("schedules", schedules.ScheduleListView.as_view(), name="api-schedules"),
    path("schedules/<name:name>", schedules.ScheduleDetailView.as_view(), name="api-schedule"),
    path("schedules/<name:name>/pause", schedules.SchedulePauseView.as_view(),
         name="api-schedule-pause"),
    path("schedules/<name:name>/resume", schedules.ScheduleResumeView.as_view(),
         name="api-schedule-resume"),
    path("schedules/<name:name>/runs", schedules.ScheduleRunsView.as_view(),
         name="api-schedule-runs"),
    path("schema", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("redoc", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    re_path(r"^.*$", api_not_found),
]
