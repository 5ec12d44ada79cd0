"""Human-decision endpoints: approvals (approve, reject, respond), reconciliations
(resolve, re-run the status query) and questions (answered through the task's
`input`). Each decision calls one service, which records it with the actor,
role, comment and the task version the caller saw; a stale version or a
second decision is a 409. Lookups are tenant-scoped: another tenant's record
is a 404."""

from __future__ import annotations

from typing import Any, Literal

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from foundations.api_base import CURSOR_PARAMETERS, TenantAPIView, cursor_page
from foundations.api_errors import error_responses
from foundations.errors import not_found
from tools_app.selectors import ledger_attempts

from ..models import Approval, DecisionChannel, Reconciliation
from ..selectors import (
    approvals_for_inbox,
    approvals_of_tenant,
    questions_of_tenant,
    reconciliations_of_tenant,
)
from ..services.decide_all import approvals_decide_all
from ..services.decisions import approval_decide, reconciliation_requery, reconciliation_resolve
from ..services.routing import approval_reassign
from .serializers import (
    ApprovalFilterSerializer,
    ApprovalSerializer,
    ApproveSerializer,
    DecideAllSerializer,
    DecidedAllSerializer,
    QuestionFilterSerializer,
    QuestionSerializer,
    ReassignSerializer,
    ReconciliationFilterSerializer,
    ReconciliationSerializer,
    RejectSerializer,
    ResolveSerializer,
    RespondSerializer,
)

ApprovalPage = cursor_page(ApprovalSerializer, "ApprovalPage")
ReconciliationPage = cursor_page(ReconciliationSerializer, "ReconciliationPage")
QuestionPage = cursor_page(QuestionSerializer, "QuestionPage")


# --- approvals --------------------------------------------------------------------------


class ApprovalViewBase(TenantAPIView):
    """An approval of the caller's tenant."""

    def approval(self, approval_id: int) -> Approval:
        approval = (
            approvals_of_tenant(tenant_id=self.access.tenant_id).filter(pk=approval_id).first()
        )
        if approval is None:
            raise not_found("Approval")
        return approval

    def decide(
        self, approval_id: int, decision: Literal["approve", "reject", "respond"], **kwargs: Any
    ) -> Response:
        approval = approval_decide(
            approval_id=approval_id,
            tenant_id=self.access.tenant_id,
            actor=self.access.actor,
            decision=decision,
            channel=DecisionChannel.API,
            **kwargs,
        )
        return Response(ApprovalSerializer(self.approval(approval.pk)).data)


class ApprovalListView(ApprovalViewBase):
    """Approvals of the caller's tenant, filtered by status and task."""

    policy = {"GET": "approval.read"}

    @extend_schema(
        operation_id="approvals_list",
        tags=["approvals"],
        summary="List approvals, newest first",
        parameters=[ApprovalFilterSerializer, *CURSOR_PARAMETERS],
        responses={200: ApprovalPage, **error_responses()},
    )
    def get(self, request: Request) -> Response:
        f = self.query(ApprovalFilterSerializer)
        qs = approvals_of_tenant(
            tenant_id=self.access.tenant_id, status=f.get("status"), task_id=f.get("task")
        )
        if f.get("assigned"):
            qs = approvals_for_inbox(qs, user_id=self.access.actor.user_id, which=f["assigned"])
        return self.paginate(qs, lambda page: ApprovalSerializer(page, many=True).data)


class ApprovalDetailView(ApprovalViewBase):
    """One approval: what was proposed, and what was decided."""

    policy = {"GET": "approval.read"}

    @extend_schema(
        operation_id="approvals_retrieve",
        tags=["approvals"],
        summary="An approval",
        responses={200: ApprovalSerializer, **error_responses()},
    )
    def get(self, request: Request, approval_id: int) -> Response:
        return Response(ApprovalSerializer(self.approval(approval_id)).data)


class ApprovalApproveView(ApprovalViewBase):
    """Approve a pending action, optionally with edited arguments (re-validated; the
    diff is stored)."""

    policy = {"POST": "approval.decide"}

    @extend_schema(
        operation_id="approvals_approve",
        tags=["approvals"],
        summary="Approve, optionally with edited arguments",
        request=ApproveSerializer,
        responses={200: ApprovalSerializer, **error_responses(409)},
    )
    def post(self, request: Request, approval_id: int) -> Response:
        data = self.validated(ApproveSerializer)
        return self.decide(
            approval_id,
            "approve",
            comment=data["comment"],
            args=data.get("args"),
            expected_version=data.get("expected_version"),
            always_allow=data["always_allow"],
        )


class ApprovalReassignView(ApprovalViewBase):
    """Hand a pending request to a person or a reviewer group."""

    policy = {"POST": "approval.decide"}

    @extend_schema(
        operation_id="approvals_reassign",
        tags=["approvals"],
        summary="Reassign to a person (to_user) or a group (to_group)",
        request=ReassignSerializer,
        responses={200: ApprovalSerializer, **error_responses(409)},
    )
    def post(self, request: Request, approval_id: int) -> Response:
        data = self.validated(ReassignSerializer)
        approval = approval_reassign(
            approval_id=approval_id, tenant_id=self.access.tenant_id, actor=self.access.actor,
            to_user=data.get("to_user"), to_group=data.get("to_group"), comment=data["comment"])
        return Response(ApprovalSerializer(self.approval(approval.pk)).data)


class ApprovalRejectView(ApprovalViewBase):
    """Reject a pending action; the agent receives the comment as a typed tool error."""

    policy = {"POST": "approval.decide"}

    @extend_schema(
        operation_id="approvals_reject",
        tags=["approvals"],
        summary="Reject, saying why",
        request=RejectSerializer,
        responses={200: ApprovalSerializer, **error_responses(409)},
    )
    def post(self, request: Request, approval_id: int) -> Response:
        data = self.validated(RejectSerializer)
        return self.decide(
            approval_id,
            "reject",
            comment=data["comment"],
            expected_version=data.get("expected_version"),
        )


class TaskApprovalsDecideAllView(ApprovalViewBase):
    """Decide every pending card of a task the same way (the calls of one model
    reply): each through the same decision as alone, in the reply's order."""

    policy = {"POST": "approval.decide"}

    @extend_schema(
        operation_id="tasks_approvals_decide_all",
        tags=["approvals"],
        summary="Approve or reject every pending approval of a task",
        request=DecideAllSerializer,
        responses={200: DecidedAllSerializer, **error_responses(409)},
    )
    def post(self, request: Request, task_id: int) -> Response:
        data = self.validated(DecideAllSerializer)
        decided = approvals_decide_all(task_id=task_id, tenant_id=self.access.tenant_id,
                                       actor=self.access.actor, decision=data["decision"],
                                       comment=data["comment"])
        return Response({"decided": ApprovalSerializer(
            [self.approval(a.pk) for a in decided], many=True).data})


class ApprovalRespondView(ApprovalViewBase):
    """Supply the tool's result instead of running it (checked against its result schema)."""

    policy = {"POST": "approval.decide"}

    @extend_schema(
        operation_id="approvals_respond",
        tags=["approvals"],
        summary="Supply the tool's result instead of running it",
        request=RespondSerializer,
        responses={200: ApprovalSerializer, **error_responses(409)},
    )
    def post(self, request: Request, approval_id: int) -> Response:
        data = self.validated(RespondSerializer)
        return self.decide(
            approval_id,
            "respond",
            output=data["output"],
            comment=data["comment"],
            expected_version=data.get("expected_version"),
        )


# --- reconciliations ----------------------------------------------------------------------


class ReconciliationViewBase(TenantAPIView):
    """A reconciliation of the caller's tenant, with the ledger's attempts."""

    def render(self, recs: list[Reconciliation]) -> list[dict[str, Any]]:
        attempts = ledger_attempts(
            tenant_id=self.access.tenant_id, keys=[r.idempotency_key for r in recs]
        )
        return list(ReconciliationSerializer(recs, many=True, context={"attempts": attempts}).data)

    def reconciliation(self, rec_id: int) -> Reconciliation:
        rec = reconciliations_of_tenant(tenant_id=self.access.tenant_id).filter(pk=rec_id).first()
        if rec is None:
            raise not_found("Reconciliation")
        return rec


class ReconciliationListView(ReconciliationViewBase):
    """Reconciliations of the caller's tenant, filtered by status and task."""

    policy = {"GET": "reconciliation.read"}

    @extend_schema(
        operation_id="reconciliations_list",
        tags=["reconciliations"],
        summary="List reconciliations, newest first",
        parameters=[ReconciliationFilterSerializer, *CURSOR_PARAMETERS],
        responses={200: ReconciliationPage, **error_responses()},
    )
    def get(self, request: Request) -> Response:
        f = self.query(ReconciliationFilterSerializer)
        qs = reconciliations_of_tenant(
            tenant_id=self.access.tenant_id, status=f.get("status"), task_id=f.get("task")
        )
        return self.paginate(qs, self.render)


class ReconciliationDetailView(ReconciliationViewBase):
    """One reconciliation: tool, arguments, key, attempts, latest status-query answer."""

    policy = {"GET": "reconciliation.read"}

    @extend_schema(
        operation_id="reconciliations_retrieve",
        tags=["reconciliations"],
        summary="A reconciliation: tool, arguments, key, attempts, status-query answer",
        responses={200: ReconciliationSerializer, **error_responses()},
    )
    def get(self, request: Request, rec_id: int) -> Response:
        return Response(self.render([self.reconciliation(rec_id)])[0])


class ReconciliationResolveView(ReconciliationViewBase):
    """Resolve an uncertain call: succeeded (with output), failed, or retry with the
    same key (only for tools that honour keys)."""

    policy = {"POST": "reconciliation.resolve"}

    @extend_schema(
        operation_id="reconciliations_resolve",
        tags=["reconciliations"],
        summary="Resolve: succeeded (with output), failed, or retry with the same key",
        request=ResolveSerializer,
        responses={200: ReconciliationSerializer, **error_responses(409)},
    )
    def post(self, request: Request, rec_id: int) -> Response:
        data = self.validated(ResolveSerializer)
        rec = reconciliation_resolve(
            reconciliation_id=rec_id,
            tenant_id=self.access.tenant_id,
            actor=self.access.actor,
            outcome=data["outcome"],
            output=data.get("output"),
            comment=data["comment"],
            expected_version=data.get("expected_version"),
            channel=DecisionChannel.API,
        )
        return Response(self.render([self.reconciliation(rec.pk)])[0])


class ReconciliationRequeryView(ReconciliationViewBase):
    """Ask the tool's status query again; a clear answer resolves the reconciliation."""

    policy = {"POST": "reconciliation.resolve"}

    @extend_schema(
        operation_id="reconciliations_requery",
        tags=["reconciliations"],
        summary="Ask the tool's status query again; a clear answer resolves it",
        request=None,
        responses={200: ReconciliationSerializer, **error_responses(409)},
    )
    def post(self, request: Request, rec_id: int) -> Response:
        rec = reconciliation_requery(
            reconciliation_id=rec_id, tenant_id=self.access.tenant_id, actor=self.access.actor,
            channel=DecisionChannel.API,
        )
        return Response(self.render([self.reconciliation(rec.pk)])[0])


# --- questions --------------------------------------------------------------------------------


class QuestionListView(TenantAPIView):
    """The agents' questions; answer one with POST /api/v1/tasks/{id}/input."""

    policy = {"GET": "question.read"}

    @extend_schema(
        operation_id="questions_list",
        tags=["questions"],
        summary="List the agents' questions (answer through POST /tasks/{id}/input)",
        parameters=[QuestionFilterSerializer, *CURSOR_PARAMETERS],
        responses={200: QuestionPage, **error_responses()},
    )
    def get(self, request: Request) -> Response:
        f = self.query(QuestionFilterSerializer)
        qs = questions_of_tenant(
            tenant_id=self.access.tenant_id, status=f.get("status"), task_id=f.get("task")
        )
        return self.paginate(qs, lambda page: QuestionSerializer(page, many=True).data)
