"""The one error type handlers raise: an HTTP status and a message saying what to do.

The SDKs show an error body as it is (`NotFoundError(body)`; the Python SDK
also for other statuses), so the body is the plain-text message.
"""


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
