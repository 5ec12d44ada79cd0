"""The agent card of a published agent or workflow (A2A v1.0 `AgentCard`).

One card each, at `/a2a/<tenant>/<agent>/.well-known/agent-card.json` (a
workflow: `/a2a/<tenant>/workflows/<name>/...`): `/.well-known/agent-card.json`
at the root cannot know the tenant before a key is shown. The card is public,
as A2A means it to be (a client reads it to learn how to authenticate); an
agent or a workflow is on one only when an admin published it. An agent's
skills: the agent itself (its description) and each tool it may call (the
tool's description). A workflow's: the workflow, its input's JSON schema (its
`inputs`) in the card's extension `INPUTS_EXTENSION`. The one security
scheme: HTTP bearer, the tenant's API keys.
"""
from __future__ import annotations

from typing import Any

from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_1_0, TransportProtocol
from google.protobuf import struct_pb2
from google.protobuf.json_format import ParseDict

from tasks_app.models import AgentProfile
from tools_app.selectors import tools_of_tenant
from workflows_app.definition import load
from workflows_app.models import Workflow
from workflows_app.selectors import current_version_of

from .caller import Target

SCHEME = "tetherApiKey"
INPUT_MODES = ["text/plain", "application/json"]
OUTPUT_MODES = ["application/json", "text/plain"]
PREFIX = "/a2a"
WORKFLOWS = "workflows"
# A workflow's input schema, in the card: A2A's skills have no schema of their own.
INPUTS_EXTENSION = "urn:tether:a2a:inputs-schema:v1"


def target_path(target: Target) -> str:
    if isinstance(target, Workflow):
        return f"{PREFIX}/{target.tenant.name}/{WORKFLOWS}/{target.name}"
    return f"{PREFIX}/{target.tenant.name}/{target.name}"


def _agent_skills(agent: AgentProfile) -> list[AgentSkill]:
    described = dict(tools_of_tenant(agent.tenant_id).filter(name__in=list(agent.tools or []))
                     .values_list("name", "description"))
    tools = sorted(agent.tools or [])
    skills = [AgentSkill(id=agent.name, name=agent.name,
                         description=agent.description or f"The {agent.name} agent.",
                         tags=["agent", *tools],
                         input_modes=INPUT_MODES, output_modes=OUTPUT_MODES)]
    return skills + [AgentSkill(id=f"tool:{tool}", name=tool,
                                description=described.get(tool) or f"The {tool} tool.",
                                tags=["tool"]) for tool in tools]


def _inputs_schema(workflow: Workflow) -> dict[str, Any]:
    version = current_version_of(workflow)
    return load(version.definition).inputs_schema if version else {"type": "object"}


def agent_card(target: Target, *, base_url: str) -> AgentCard:
    """`base_url`: scheme and host the card was asked on (the JSON-RPC URL is under it)."""
    extensions: list[AgentExtension] = []
    if isinstance(target, Workflow):
        kind = "workflow"
        skills = [AgentSkill(
            id=target.name, name=target.name, tags=["workflow"],
            description=(target.description or f"The {target.name} workflow.")
            + " Its input: a data part matching the schema of the card's extension "
            + INPUTS_EXTENSION + ".",
            input_modes=["application/json"], output_modes=OUTPUT_MODES)]
        extensions.append(AgentExtension(
            uri=INPUTS_EXTENSION, required=False,
            description="The JSON schema a message's data part (the input) must match.",
            params=ParseDict({"inputs": _inputs_schema(target)}, struct_pb2.Struct())))
    else:
        kind = "agent"
        skills = _agent_skills(target)
    version = target.current_version or 1
    return AgentCard(
        name=target.name,
        description=target.description or f"The {target.name} {kind} of {target.tenant.name}.",
        supported_interfaces=[AgentInterface(
            url=base_url.rstrip("/") + target_path(target),
            protocol_binding=TransportProtocol.JSONRPC.value,
            protocol_version=PROTOCOL_VERSION_1_0)],
        provider=AgentProvider(organization="Tether", url=base_url),
        version=str(version),
        capabilities=AgentCapabilities(streaming=True, push_notifications=False,
                                       extended_agent_card=False, extensions=extensions),
        security_schemes={SCHEME: SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(
            scheme="Bearer", bearer_format="Tether API key",
            description="An API key of the agent's tenant, as for the REST API."))},
        security_requirements=[SecurityRequirement(schemes={SCHEME: StringList()})],
        default_input_modes=INPUT_MODES,
        default_output_modes=OUTPUT_MODES,
        skills=skills,
    )
