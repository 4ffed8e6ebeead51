// The errors the worker client throws for the server's refusals.

/** A refusal from the server, in its `{"error": {"code", "message"}}` shape. */
export class WorkerApiError extends Error {
  constructor(status, code, message, body) {
    super(`${status} ${code}: ${message}`);
    this.status = status;
    this.code = code;
    this.detail = message;
    this.body = body;
  }
}
