// The dashboard's only way to Sluice: the public /v1 HTTP API, from the browser.

/** A refused or failed call: the HTTP status (0 when the server could not be reached) and
 *  the API's stable error code and message. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
  }
}

/** A path segment (topic, group or subscription name), escaped for a URL. */
export const seg = encodeURIComponent;

/**
 * Calls `method /v1{path}` with an optional JSON body and answers the JSON answer (null
 * for 204). Throws ApiError for an error answer or no answer at all, and lets an abort
 * through as the AbortError it is.
 */
export async function api(method, path, body, { signal } = {}) {
  const init = { method, signal, headers: { accept: 'application/json' } };
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(`/v1${path}`, init);
  } catch (error) {
    if (error.name === 'AbortError') throw error;
    throw new ApiError(0, 'unreachable', `the server did not answer: ${error.message}`);
  }
  const text = await response.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    // Not JSON: kept as text in the error below.
  }
  if (!response.ok) {
    const error = json && json.error;
    throw new ApiError(
      response.status,
      (error && error.code) || `http_${response.status}`,
      (error && error.message) || text.slice(0, 200) || response.statusText,
    );
  }
  return json;
}

/** `api('GET', path)`, but null when the thing is gone (deleted since it was listed). */
export async function describe(path) {
  try {
    return await api('GET', path);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return null;
    throw error;
  }
}
