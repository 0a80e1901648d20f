/* Hearth console: the chat playground (seed 001 §8). Plain script, shipped in the package.
 *
 * SSEParser reads a text/event-stream from byte chunks cut anywhere: an event split over many chunks,
 * several events in one chunk, "\n", "\r\n" or "\r" line ends, a UTF-8 character split between chunks
 * (one TextDecoder, {stream: true}), multi-line data, comments; an event (or a line) larger than
 * maxEventChars characters stops the parse with an error instead of growing without bound. An unterminated last
 * event is not dispatched (as in the EventSource standard).
 *
 * ChatClient is the state machine: idle → connecting → generating → completed | busy | failed | stopped.
 * Stop aborts the request and shows "stopped" (not a failure). Nothing is ever sent again by itself:
 * only Retry — a person's click — sends the question again, under a new request id.
 */
(function () {
  "use strict";

  class SSEError extends Error {}

  class SSEParser {
    constructor(onEvent, maxEventChars) {
      this.onEvent = onEvent;
      this.max = maxEventChars || 1048576;
      this.decoder = new TextDecoder("utf-8");
      this.buf = "";
      this.id = null; // the last event id: kept from one event to the next (as EventSource does)
      this.reset();
    }

    reset() {
      this.type = "";
      this.data = [];
      this.size = 0;
    }

    push(bytes) {
      this.buf += this.decoder.decode(bytes, { stream: true });
      this.drain(false);
    }

    end() {
      this.buf += this.decoder.decode();
      this.drain(true);
      const unterminated = this.buf.length > 0 || this.data.length > 0 || this.type !== "";
      this.buf = "";
      this.reset();
      return unterminated;
    }

    drain(final) {
      let start = 0;
      for (;;) {
        let i = start;
        const n = this.buf.length;
        while (i < n) {
          const c = this.buf.charCodeAt(i);
          if (c === 10 || c === 13) break;
          i++;
        }
        if (i >= n) break;
        if (this.buf.charCodeAt(i) === 13 && i + 1 >= n && !final) break; // a "\r" whose "\n" may follow
        const line = this.buf.slice(start, i);
        start = i + (this.buf.charCodeAt(i) === 13 && this.buf.charCodeAt(i + 1) === 10 ? 2 : 1);
        this.line(line);
      }
      this.buf = this.buf.slice(start);
      if (this.buf.length > this.max) throw new SSEError("an event line is larger than " + this.max + " characters");
    }

    line(text) {
      if (text === "") {
        if (this.data.length > 0 || this.type !== "") {
          this.onEvent({ event: this.type || "message", data: this.data.join("\n"), id: this.id });
        }
        this.reset();
        return;
      }
      this.size += text.length;
      if (this.size > this.max) throw new SSEError("an event is larger than " + this.max + " characters");
      if (text.charCodeAt(0) === 58) return; // ":" a comment
      const colon = text.indexOf(":");
      const field = colon < 0 ? text : text.slice(0, colon);
      let value = colon < 0 ? "" : text.slice(colon + 1);
      if (value.charCodeAt(0) === 32) value = value.slice(1);
      if (field === "event") this.type = value;
      else if (field === "data") this.data.push(value);
      else if (field === "id" && value.indexOf("\0") < 0) this.id = value;
    }
  }

  const BUSY_TEXT = "The generation channel is full; please try again later. This question was not submitted twice.";
  const ACTIVE = { connecting: true, generating: true };

  function newRequestId() {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return "console-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  class ChatClient {
    constructor(root) {
      this.root = root;
      this.url = root.dataset.url;
      this.csrf = root.dataset.csrf;
      this.connectMs = Number(root.dataset.connectMs || 10000);
      this.idleMs = Number(root.dataset.idleMs || 180000);
      this.maxEventChars = Number(root.dataset.maxEventChars || 1048576);
      this.el = (name) => root.querySelector("[data-role=" + name + "]");
      this.history = [];
      this.state = "idle";
      this.controller = null;
      this.question = null;
      this.sent = 0;
      this.el("send").addEventListener("click", (e) => { e.preventDefault(); this.ask(); });
      this.el("stop").addEventListener("click", (e) => { e.preventDefault(); this.stop(); });
      this.el("retry").addEventListener("click", (e) => { e.preventDefault(); this.retry(); });
      window.addEventListener("pagehide", () => this.abort("unload"));
      this.show("idle", "");
    }

    show(state, note) {
      this.state = state;
      this.root.dataset.state = state;
      this.el("status").textContent = state;
      this.el("note").textContent = note || "";
      this.el("send").disabled = !!ACTIVE[state];
      this.el("stop").disabled = !ACTIVE[state];
      this.el("retry").hidden = !(state === "busy" || state === "failed" || state === "stopped") || !this.question;
    }

    ask() {
      const text = this.el("question").value.trim();
      if (!text || ACTIVE[this.state]) return;
      this.question = text;
      this.run();
    }

    retry() {
      if (this.question && !ACTIVE[this.state]) this.run(); // a person's click: a new request id
    }

    stop() {
      if (!ACTIVE[this.state]) return;
      this.abort("user");
      this.show("stopped", "Stopped. Nothing was sent again.");
    }

    abort(reason) {
      if (this.controller) {
        this.controller.abort(reason);
        this.controller = null;
      }
    }

    async run() {
      const controller = new AbortController();
      this.controller = controller;
      const answerEl = this.el("answer");
      let answer = "";
      let ended = false;
      answerEl.textContent = "";
      this.el("meta").textContent = "";
      this.show("connecting", "");
      const request = {
        messages: this.history.concat([{ role: "user", content: this.question }]),
        request_id: newRequestId(), stream: true,
      };
      const model = this.el("model").value, role = this.el("role").value.trim();
      if (model) request.model = model;
      if (role) request.role = role;
      const body = JSON.stringify(request);
      let idle = null;
      const arm = () => {
        clearTimeout(idle);
        idle = setTimeout(() => controller.abort("idle"), this.idleMs);
      };
      const connect = setTimeout(() => controller.abort("connect"), this.connectMs);
      const onEvent = (ev) => {
        if (ended || controller.signal.aborted) return;
        let data = {};
        try { data = ev.data ? JSON.parse(ev.data) : {}; } catch (e) { data = {}; }
        if (ev.event === "message") {
          answer += data.answer || "";
          answerEl.textContent = answer;
          if (this.state !== "generating") this.show("generating", "");
        } else if (ev.event === "busy") {
          ended = true;
          this.show("busy", BUSY_TEXT);
        } else if (ev.event === "error") {
          ended = true;
          this.show("failed", (data.code ? data.code + ": " : "") + (data.message || "the call failed"));
        } else if (ev.event === "done") {
          ended = true;
          this.history.push({ role: "user", content: this.question }, { role: "assistant", content: answer });
          const usage = data.usage || {};
          const tokens = usage.total_tokens != null ? usage.total_tokens
            : (usage.prompt_tokens || 0) + (usage.completion_tokens || 0);
          this.el("meta").textContent = "model " + (data.model || "?") + " · " + tokens + " tokens" +
            (data.cost != null ? " · cost " + data.cost : "") +
            (data.prompt_code ? " · prompt " + data.prompt_code + " v" + data.prompt_version : "");
          this.show("completed", "");
        }
      };
      try {
        this.sent += 1;
        this.root.dataset.sent = String(this.sent);
        const response = await fetch(this.url, {
          method: "POST", body, signal: controller.signal, credentials: "same-origin", cache: "no-store",
          headers: { "content-type": "application/json", "x-csrf-token": this.csrf, accept: "text/event-stream" },
        });
        clearTimeout(connect);
        if (response.status === 429 || response.status === 503) {
          this.show("busy", BUSY_TEXT);
          return;
        }
        if (!response.ok || !response.body) {
          let message = "HTTP " + response.status;
          try { const j = await response.json(); if (j.error) message = j.error.code + ": " + j.error.message; }
          catch (e) { /* not JSON */ }
          this.show("failed", message);
          return;
        }
        arm();
        const parser = new SSEParser(onEvent, this.maxEventChars);
        const reader = response.body.getReader();
        for (;;) { // to the end of the stream: the server closes it after done, busy or error
          const { value, done } = await reader.read();
          if (done) break;
          arm();
          parser.push(value);
        }
        parser.end();
        if (!ended) this.show("failed", "The stream ended without an answer.");
      } catch (err) {
        const reason = controller.signal.reason;
        if (reason === "user" || reason === "unload") return; // shown as stopped by stop()
        if (reason === "connect") this.show("failed", "Could not connect within " + this.connectMs / 1000 + " s.");
        else if (reason === "idle") this.show("failed", "No message or heartbeat for " + this.idleMs / 1000 + " s.");
        else if (err instanceof SSEError) { controller.abort("parse"); this.show("failed", err.message); }
        else if (!ended) this.show("failed", String(err && err.message ? err.message : err));
      } finally {
        clearTimeout(connect);
        clearTimeout(idle);
        if (this.controller === controller) this.controller = null;
      }
    }
  }

  window.HearthSSE = { SSEParser, SSEError };
  const root = document.querySelector("[data-playground]");
  if (root) window.hearthPlayground = new ChatClient(root);
})();
