/*
 * The open chat's messages as this page holds them: the maps the transcript draws from, the
 * frames and reads fill, and the panels read (render/transcript.js clears them on a switch), and
 * the sends the server has not confirmed yet (controllers/sending.js owns those).
 */
// The open chat's messages as this page holds them, and their elements. Cleared on a switch.
export const messages = new Map(); // id -> message
export const nodes = new Map(); // id -> element
export const failures = new Map(); // id -> {code, message} from message.failed frames
export const recalls = new Map(); // reply id -> [{tool, names, query, found}] from recall frames
export const bySeq = new Map(); // seq -> message (to find the tool messages stored before a reply)
export const toolSteps = new Map(); // reply id -> Map(call id -> step) from tool.started/finished frames
export const storedToolCalls = new Set(); // call ids whose stored call message is on the page

// Sends the server has not confirmed yet: client_id -> {content, node, message, timer, transport}.
export const pendingSends = new Map();
