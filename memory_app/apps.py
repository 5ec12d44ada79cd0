"""Memory plugs into the runtime through its registries, never through an
import of memory_app by tasks_app: the context's sources (what a step's model
sees), the `remember` decision's handler, the reader of `read_source` for
memory citation ids, the recovery sweep (expired items are deleted), a
subject's erasure and export, and the inbox (proposed writes, with the
approvals)."""
from django.apps import AppConfig


class MemoryAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "memory_app"
    verbose_name = "Memory"

    def ready(self) -> None:
        from approvals_app.console.sections import InboxSection, register_inbox_section
        from retention_app.erasure_parts import register_erasure_part, register_export_part
        from tasks_app.context.originals import register_source_reader
        from tasks_app.context.sources import register_context_source
        from tasks_app.runner.recording import KindHandler, register_decision_kind
        from tasks_app.store.hooks import on_sweep

        from .selectors import memory_of, open_proposal_count, open_proposals
        from .services import (
            memory_context,
            memory_source,
            purge_expired,
            remember_check,
            remember_record,
            subject_erase,
        )

        register_context_source("memory", memory_context)
        register_source_reader("mem", memory_source)
        register_decision_kind("remember", KindHandler(check=remember_check,
                                                       record=remember_record))
        on_sweep(purge_expired)
        register_erasure_part("memory", lambda tenant_id, subject, actor: subject_erase(
            tenant_id=tenant_id, subject=subject, actor=actor))
        register_export_part("memory", memory_of)
        register_inbox_section(InboxSection(
            key="memory", title="Memory writes", template="memory/_proposal_card.html",
            empty="No memory write is waiting for review.",
            rows=lambda tenant_id, limit: list(open_proposals(tenant_id)[:limit]),
            count=open_proposal_count))
