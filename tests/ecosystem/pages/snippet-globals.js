// What a docs snippet takes from the app around it: the server is the page's origin, no token,
// the session from ?session=<id>.
export const baseUrl = location.origin;
export const getToken = undefined;
export const sessionId = new URLSearchParams(location.search).get("session");
