"""Evaluation endpoints, `/api/v1/evaluations` (operators and admins): start
one, list them, read one (its progress and summary) and its per-task table.
Every lookup is by the caller's tenant, so another tenant's evaluation is a
404."""
from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from foundations.api_base import CURSOR_PARAMETERS, TenantAPIView, cursor_page
from foundations.api_errors import error_responses
from foundations.errors import not_found
from tasks_app.api.serializers import subject_field
from tasks_app.machine import TERMINAL
from tasks_app.models import Step

from ..models import Evaluation, EvaluationStatus, Scorer
from ..selectors import evaluation_of, evaluation_tasks, evaluations_of, progress_of, replay_of
from ..services.comparing import AlignedRow, replay_aligned, shown
from ..services.starting import Selection, evaluation_start

TAGS = ["evaluations"]
MAX_IDS = 100_000
MAX_INT = 2**31 - 1
ENDED = [s.value for s in TERMINAL]


# --- input ------------------------------------------------------------------------------


class _Closed(serializers.Serializer):
    """Fields it does not know are refused, not ignored."""

    def to_internal_value(self, data: Any) -> Any:
        unknown = sorted(set(data) - set(self.fields)) if isinstance(data, dict) else []
        if unknown:
            raise serializers.ValidationError({name: ["not a field here"] for name in unknown})
        return super().to_internal_value(data)


class TaskFilterSerializer(_Closed):
    status = serializers.ListField(child=serializers.ChoiceField(choices=ENDED),
                                   required=False, max_length=3,
                                   help_text="Ended statuses (default: all three).")
    created_after = serializers.DateTimeField(required=False)
    created_before = serializers.DateTimeField(required=False)
    subject = subject_field(required=False)
    agent_version = serializers.IntegerField(min_value=1, max_value=MAX_INT, required=False)


class TaskChoiceSerializer(_Closed):
    filter = TaskFilterSerializer(required=False)
    ids = serializers.ListField(child=serializers.IntegerField(min_value=1, max_value=2**62),
                                required=False, allow_empty=False, max_length=MAX_IDS)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("filter" in attrs) == ("ids" in attrs):
            raise serializers.ValidationError("give either filter or ids")
        return attrs


class EvaluationStartSerializer(_Closed):
    agent = serializers.CharField(max_length=64)
    candidate_version = serializers.IntegerField(min_value=1, max_value=MAX_INT)
    baseline_version = serializers.IntegerField(
        min_value=1, max_value=MAX_INT, required=False,
        help_text="Replay only tasks run with this version (the baseline).")
    tasks = TaskChoiceSerializer()
    limit = serializers.IntegerField(min_value=1, max_value=MAX_IDS, required=False,
                                     help_text="At most this many recorded tasks, newest first "
                                               "(and at most TETHER_EVALUATION_MAX_TASKS).")
    scorer = serializers.ChoiceField(choices=Scorer.choices)
    judge = serializers.CharField(max_length=64, required=False,
                                  help_text="The judge scorer's agent profile.")
    pass_threshold = serializers.FloatField(min_value=0, max_value=1, required=False,
                                            help_text="A task passes at this score or above "
                                                      "(default 1; 0.5 for the judge).")
    live_reads = serializers.BooleanField(
        required=False, default=False,
        help_text="Make read-only calls the recorded task did not make for real.")


# --- output -----------------------------------------------------------------------------


class EvaluationSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    agent = serializers.CharField(source="agent.name")
    candidate_version = serializers.IntegerField()
    baseline_version = serializers.IntegerField(allow_null=True)
    tasks = serializers.JSONField(source="selection")
    limit = serializers.IntegerField()
    scorer = serializers.ChoiceField(choices=Scorer.choices)
    judge = serializers.CharField(allow_blank=True)
    pass_threshold = serializers.FloatField()
    live_reads = serializers.BooleanField()
    status = serializers.ChoiceField(choices=EvaluationStatus.choices)
    progress = serializers.SerializerMethodField()
    summary = serializers.JSONField(help_text="Once finished: pass rate, divergences, "
                                              "unmatched writes, cost and steps per task.")
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)

    def get_progress(self, evaluation: Evaluation) -> dict[str, int]:
        return progress_of(evaluation)


class EvaluationTaskSerializer(serializers.Serializer):
    recorded_task = serializers.IntegerField(source="recorded_task_id")
    shadow_task = serializers.IntegerField(source="shadow_task_id")
    judge_task = serializers.IntegerField(source="judge_task_id", allow_null=True)
    done = serializers.BooleanField()
    score = serializers.FloatField(allow_null=True)
    passed = serializers.BooleanField(allow_null=True)
    reason = serializers.CharField(allow_blank=True)
    comparison = serializers.JSONField(help_text="Baseline and candidate side by side.")


class AlignedRowSerializer(serializers.Serializer):
    step_no = serializers.IntegerField()
    same = serializers.BooleanField(help_text="Both runs have the step, with the same decision.")
    baseline = serializers.SerializerMethodField(
        help_text="The recorded task's step (null: it has none): step_no, kind, tool and "
                  "args, question or result; its status and error.")
    candidate = serializers.SerializerMethodField(help_text="The shadow task's step, the same.")

    @staticmethod
    def _side(step: Step | None) -> dict[str, Any] | None:
        if step is None:
            return None
        return {**(shown(step) or {}), "status": step.status, "error": step.error}

    def get_baseline(self, row: AlignedRow[Step]) -> dict[str, Any] | None:
        return self._side(row.baseline)

    def get_candidate(self, row: AlignedRow[Step]) -> dict[str, Any] | None:
        return self._side(row.candidate)


class EvaluationCompareSerializer(EvaluationTaskSerializer):
    first_divergence = serializers.IntegerField(
        allow_null=True, help_text="The step_no of the first row whose decisions differ.")
    steps = AlignedRowSerializer(many=True, help_text="Both timelines, one row per step_no.")


EvaluationPage = cursor_page(EvaluationSerializer, "EvaluationPage")
EvaluationTaskPage = cursor_page(EvaluationTaskSerializer, "EvaluationTaskPage")


# --- views ------------------------------------------------------------------------------


class EvaluationView(TenantAPIView):
    def evaluation(self, evaluation_id: int) -> Evaluation:
        evaluation = evaluation_of(self.access.tenant_id, evaluation_id)
        if evaluation is None:
            raise not_found("Evaluation")
        return evaluation


class EvaluationListView(EvaluationView):
    policy = {"GET": "evaluation.read", "POST": "evaluation.write"}

    @extend_schema(operation_id="evaluations_list", tags=TAGS,
                   summary="List evaluations, newest first",
                   parameters=CURSOR_PARAMETERS,
                   responses={200: EvaluationPage, **error_responses()})
    def get(self, request: Request) -> Response:
        return self.paginate(evaluations_of(self.access.tenant_id),
                             lambda page: EvaluationSerializer(page, many=True).data)

    @extend_schema(operation_id="evaluations_create", tags=TAGS,
                   summary="Replay recorded tasks as shadow tasks with a candidate version",
                   description="Each chosen recorded task runs again with the candidate "
                   "version, with no real effects: tool calls answered from the recorded "
                   "task's ledger, unmatched writes never made, recorded answers reused.",
                   request=EvaluationStartSerializer,
                   responses={201: EvaluationSerializer, **error_responses()})
    def post(self, request: Request) -> Response:
        data = self.validated(EvaluationStartSerializer)
        chosen = data["tasks"]
        f = chosen.get("filter") or {}
        selection = (Selection(ids=list(chosen["ids"])) if "ids" in chosen else Selection(
            statuses=f.get("status"), created_after=f.get("created_after"),
            created_before=f.get("created_before"), subject=f.get("subject", ""),
            agent_version=f.get("agent_version")))
        evaluation = evaluation_start(
            tenant_id=self.access.tenant_id, agent=data["agent"],
            candidate_version=data["candidate_version"], selection=selection,
            scorer=data["scorer"], actor=self.access.actor,
            baseline_version=data.get("baseline_version"), limit=data.get("limit"),
            live_reads=data["live_reads"], judge=data.get("judge", ""),
            pass_threshold=data.get("pass_threshold"))
        response = Response(EvaluationSerializer(self.evaluation(evaluation.pk)).data,
                            status=status.HTTP_201_CREATED)
        response["Location"] = f"/api/v1/evaluations/{evaluation.pk}"
        return response


class EvaluationDetailView(EvaluationView):
    policy = {"GET": "evaluation.read"}

    @extend_schema(operation_id="evaluations_retrieve", tags=TAGS,
                   summary="An evaluation: its progress and, once finished, its summary",
                   responses={200: EvaluationSerializer, **error_responses()})
    def get(self, request: Request, evaluation_id: int) -> Response:
        return Response(EvaluationSerializer(self.evaluation(evaluation_id)).data)


class EvaluationTasksView(EvaluationView):
    policy = {"GET": "evaluation.read"}

    @extend_schema(operation_id="evaluations_tasks", tags=TAGS,
                   summary="An evaluation's replays: baseline and candidate side by side",
                   parameters=CURSOR_PARAMETERS,
                   responses={200: EvaluationTaskPage, **error_responses()})
    def get(self, request: Request, evaluation_id: int) -> Response:
        rows: Any = evaluation_tasks(self.evaluation(evaluation_id))
        return self.paginate(rows, lambda page: EvaluationTaskSerializer(page, many=True).data)



class EvaluationCompareView(EvaluationView):
    policy = {"GET": "evaluation.read"}

    @extend_schema(operation_id="evaluations_task_compare", tags=TAGS,
                   summary="A replay's two timelines aligned at the first divergence",
                   description="The recorded task (`task_id`) and its shadow task, step by "
                   "step: the same step_no on one row, each row marked whether both decided "
                   "the same, and the step_no where they first differ.",
                   responses={200: EvaluationCompareSerializer, **error_responses()})
    def get(self, request: Request, evaluation_id: int, task_id: int) -> Response:
        replay = replay_of(self.evaluation(evaluation_id), task_id)
        if replay is None:
            raise not_found("Task of this evaluation")
        alignment = replay_aligned(replay)
        return Response({**EvaluationTaskSerializer(replay).data,
                         "first_divergence": alignment.divergence,
                         "steps": AlignedRowSerializer(alignment.rows, many=True).data})
