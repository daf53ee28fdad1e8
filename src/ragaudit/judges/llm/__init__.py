"""The LLM endpoint layer shared by the chat-model judges: the OpenAI-compatible endpoint (retries,
structured-output fallback, sync and async clients), the judge prompt and the reply parsing."""

__all__: list[str] = []
