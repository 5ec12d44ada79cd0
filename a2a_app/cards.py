"""The agent card of a published agent (A2A v1.0 `AgentCard`).

One card per agent, at `/a2a/<tenant>/<agent>/.well-known/agent-card.json`:
`/.well-known/agent-card.json` at the root cannot know the tenant before a key
is shown. The card is public, as A2A means it to be (a client reads it to learn
how to authenticate); an agent is on one only when an admin published it. Its
skills: the agent itself (its description) and each tool it may call (the
tool's description); its one security scheme: HTTP bearer, the tenant's API keys.
"""
from __future__ import annotations

from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_1_0, TransportProtocol

from tasks_app.models import AgentProfile
from tools_app.selectors import tools_of_tenant

SCHEME = "tetherApiKey"
INPUT_MODES = ["text/plain", "application/json"]
OUTPUT_MODES = ["application/json", "text/plain"]
PREFIX = "/a2a"


def agent_path(agent: AgentProfile) -> str:
    return f"{PREFIX}/{agent.tenant.name}/{agent.name}"


def agent_card(agent: AgentProfile, *, base_url: str) -> AgentCard:
    """`base_url`: scheme and host the card was asked on (the JSON-RPC URL is under it)."""
    described = dict(tools_of_tenant(agent.tenant_id).filter(name__in=list(agent.tools or []))
                     .values_list("name", "description"))
    tools = sorted(agent.tools or [])
    skills = [AgentSkill(id=agent.name, name=agent.name,
                         description=agent.description or f"The {agent.name} agent.",
                         tags=["agent", *tools],
                         input_modes=INPUT_MODES, output_modes=OUTPUT_MODES)]
    skills += [AgentSkill(id=f"tool:{tool}", name=tool,
                          description=described.get(tool) or f"The {tool} tool.",
                          tags=["tool"]) for tool in tools]
    return AgentCard(
        name=agent.name,
        description=agent.description or f"The {agent.name} agent of {agent.tenant.name}.",
        supported_interfaces=[AgentInterface(
            url=base_url.rstrip("/") + agent_path(agent),
            protocol_binding=TransportProtocol.JSONRPC.value,
            protocol_version=PROTOCOL_VERSION_1_0)],
        provider=AgentProvider(organization="Tether", url=base_url),
        version=str(agent.current_version or 1),
        capabilities=AgentCapabilities(streaming=True, push_notifications=False,
                                       extended_agent_card=False),
        security_schemes={SCHEME: SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(
            scheme="Bearer", bearer_format="Tether API key",
            description="An API key of the agent's tenant, as for the REST API."))},
        security_requirements=[SecurityRequirement(schemes={SCHEME: StringList()})],
        default_input_modes=INPUT_MODES,
        default_output_modes=OUTPUT_MODES,
        skills=skills,
    )
