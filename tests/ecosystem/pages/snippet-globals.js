// What a docs snippet takes from the app around it: the server is the page's origin, no token,
// the session from ?session=<id>; and the side effect a snippet guards (`onNewReply`: a sound
// or a notification in an app), which records the reply on window.newReplies for the tests.
export const baseUrl = location.origin;
export const getToken = undefined;
export const sessionId = new URLSearchParams(location.search).get("session");
window.newReplies = [];
export const onNewReply = (m) => window.newReplies.push(m.key ?? m.id);
