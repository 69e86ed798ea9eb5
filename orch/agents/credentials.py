"""The credentials shape of each model API the gateway speaks (orch.gateway.apis.registry): which variables hold
a key, how the gateway presents it upstream, and where the API is. An agent that speaks one of these APIs
takes its shape, and changes only what its CLI reads differently (another base URL variable, a login file)."""

from __future__ import annotations

from orch.modelaccess import Credentials, GatewayEnv

OPENAI_URL = "https://api.openai.com/v1"
OPENAI_API_NAMES = {"openai-chat": "Chat Completions", "openai-responses": "Responses"}


def openai_key(protocol: str, base_url_env: str = "OPENAI_BASE_URL", hint: str = "") -> Credentials:
    """An OpenAI API key (`protocol`: openai-chat or openai-responses), sent upstream as a bearer token."""
    what = OPENAI_API_NAMES[protocol]
    return Credentials(
        env=("OPENAI_API_KEY",),
        base_url_env=base_url_env,
        api_url=OPENAI_URL,
        schemes=(("OPENAI_API_KEY", "bearer"),),
        protocols=(protocol,),
        hint=hint or f"export OPENAI_API_KEY=... ({base_url_env}=... for another {what} API)",
    )


def anthropic_key(hint: str = "export ANTHROPIC_API_KEY=...") -> Credentials:
    """An Anthropic API key, bearer token or Claude Code OAuth token."""
    return Credentials(
        env=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"),
        base_url_env="ANTHROPIC_BASE_URL",
        api_url="https://api.anthropic.com",
        # A setup-token is an OAuth bearer token: the API also wants its OAuth beta header.
        schemes=(
            ("ANTHROPIC_API_KEY", "x-api-key"),
            ("ANTHROPIC_AUTH_TOKEN", "bearer"),
            ("CLAUDE_CODE_OAUTH_TOKEN", "oauth"),
        ),
        protocols=("anthropic",),
        hint=hint,
    )


def gemini_key(base_url_env: str = "GOOGLE_GEMINI_BASE_URL", hint: str = "export GEMINI_API_KEY=...") -> Credentials:
    """A Gemini API key, sent upstream as x-goog-api-key (orch.gateway.apis.gemini)."""
    return Credentials(
        # GOOGLE_API_KEY: Google's other name for an API key (Gemini CLI reads it for Vertex AI): never a worker's.
        env=("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        base_url_env=base_url_env,
        api_url="https://generativelanguage.googleapis.com",
        schemes=(("GEMINI_API_KEY", "x-api-key"), ("GOOGLE_API_KEY", "x-api-key")),
        protocols=("gemini",),
        hint=hint,
    )


def gateway_env(credentials: Credentials) -> GatewayEnv:
    """How a worker is pointed at the run's gateway: the API's base URL variable, and its first key variable
    (set to the worker's token)."""
    if not credentials.env or credentials.base_url_env is None:
        raise ValueError("credentials with no key or base URL variable cannot point at the gateway")
    return GatewayEnv(base_url_env=credentials.base_url_env, key_env=credentials.env[0])
