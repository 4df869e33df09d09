// Package console is the GTR's operator console: a web page on the admin
// listener showing the cells and their instances (health, weight, share of
// keys, in-flight, reference data version, refreshed every few seconds),
// every replica's recent re-routes and ejections (Config.Events) and the
// audit log, and
// letting an operator drain, restore and weight a cell, now or ramped,
// after a preview of the share of keys that would move. Its search finds
// a partner's transaction by ID in every cell (the Admin API's
// FindTransaction, as gtrctl txn get): each cell's record by the attempt
// that wrote it, which cell decided it and which attempts stepped back
// (its re-routes), its masked card and its callbacks, and the cells that
// did not answer; another finds a refused call by the reference its
// partner quotes, on every replica (FindReference).
//
// Serving. The console shares the admin listener and its TLS with the gRPC
// Admin API: Split completes each connection's TLS handshake and hands
// gRPC clients (ALPN "h2" alone) to the gRPC server, untouched and with
// grpclimits' options in force, and browsers (ALPN "http/1.1") to the
// console's http.Server (NewServer), which bounds headers, bodies and
// time on its own. See Split for why not grpc.Server.ServeHTTP.
//
// Authority. The console is a client of the Admin API, like gtrctl: it
// calls it (Config.Admin, an in-process connection to a gRPC server with
// the same auth and audit interceptors) with the operator's own token, so
// roles are enforced by the API's one policy table and every change is
// audited with the operator as its actor; a viewer's drain is refused
// there (403 here) and audited as refused. The token is sent once, at
// login, kept in the server-side session and never put in a page, a URL,
// a cookie or a log line; the browser holds only a random session ID in a
// __Host- cookie (Secure, HttpOnly, SameSite=Strict). Every /api call also
// needs the X-Cellpay-Console header (which a cross-site form cannot send,
// and a cross-site script cannot without a CORS preflight that is never
// granted) and, when the browser sends one, a same-origin Origin. Pages
// carry a strict Content-Security-Policy (no inline script or style,
// nothing from elsewhere) and cannot be framed. The assets are embedded:
// no CDN, no framework.
//
// It must never serve anything on the partners' listener, and never act
// with any authority but the session operator's.
package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cellpay/cellpay/cmd/gtr/internal/admin"
	"github.com/cellpay/cellpay/internal/operators"
	"github.com/cellpay/cellpay/pkg/adminproto"
)

//go:embed assets
var assets embed.FS

// CookieName is the session cookie: __Host- binds it to this origin,
// Secure and path /.
const CookieName = "__Host-cellpay-console"

// CSRFHeader must be on every /api request, with the value "1".
const CSRFHeader = "X-Cellpay-Console"

// Limits.
const (
	maxBody     = 16 << 10 // a request body: a token or a weight change
	callTimeout = 10 * time.Second
	auditLimit  = 50
	eventsLimit = 50
)

// Config configures the console handler.
type Config struct {
	// Admin is the Admin API, called with the session operator's token.
	// Required.
	Admin adminproto.AdminClient
	// Authenticate tells whose a token is, at login from the client
	// address remote (admin.Auth's Login: the operators in force, failures
	// audited and throttled, operators.ErrThrottled). Required.
	Authenticate func(ctx context.Context, token, remote string) (operators.Operator, error)
	// Recent is this replica's recent re-routes and ejections; nil shows
	// none.
	Recent *Recent
	// Events, if set, is every replica's recent events merged (newest
	// first, at most limit), shown instead of Recent's alone.
	Events func(ctx context.Context, limit int) ([]Event, error)
	// MaxSessions bounds the sessions held [64]; SessionTTL a session's
	// life [8h]; IdleTimeout a session unused [30m].
	MaxSessions int
	SessionTTL  time.Duration
	IdleTimeout time.Duration
	Now         func() time.Time
	Log         *slog.Logger
}

func (c *Config) validate() error {
	if c.Admin == nil || c.Authenticate == nil {
		return errors.New("console: Admin and Authenticate are required")
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = 64
	}
	if c.SessionTTL <= 0 {
		c.SessionTTL = 8 * time.Hour
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 30 * time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

// Handler serves the console.
type Handler struct {
	cfg      Config
	sessions *sessions
	mux      *http.ServeMux
}

// New returns the console's handler.
func New(cfg Config) (*Handler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, sessions: newSessions(cfg.MaxSessions, cfg.SessionTTL, cfg.IdleTimeout, cfg.Now), mux: http.NewServeMux()}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	files := http.FileServerFS(static)
	for _, p := range []string{"/console.js", "/console.css"} {
		h.mux.Handle("GET "+p, files)
	}
	h.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, static, "index.html")
	})
	h.mux.HandleFunc("POST /api/login", h.login)
	h.mux.HandleFunc("POST /api/logout", h.logout)
	h.mux.HandleFunc("GET /api/session", h.authed(h.session))
	h.mux.HandleFunc("GET /api/cells", h.authed(h.cells))
	h.mux.HandleFunc("GET /api/events", h.authed(h.events))
	h.mux.HandleFunc("GET /api/audit", h.authed(h.audit))
	h.mux.HandleFunc("GET /api/txn", h.authed(h.txn))
	h.mux.HandleFunc("GET /api/ref", h.authed(h.ref))
	h.mux.HandleFunc("POST /api/preview", h.authed(h.preview))
	h.mux.HandleFunc("POST /api/change", h.authed(h.change))
	return h, nil
}

// csp allows this origin's script, style and fetches, and nothing else:
// no inline script or style, no frames, no form posts elsewhere.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", csp)
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")
	if strings.HasPrefix(r.URL.Path, "/api/") {
		if err := sameOrigin(r); err != nil {
			writeError(w, http.StatusForbidden, err.Error())
			return
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	h.mux.ServeHTTP(w, r)
}

// sameOrigin is the CSRF check of every /api request: the custom header a
// cross-site request cannot carry without a preflight, and the browser's
// own word on where the request comes from when it gives one.
func sameOrigin(r *http.Request) error {
	if r.Header.Get(CSRFHeader) != "1" {
		return fmt.Errorf("missing %s header", CSRFHeader)
	}
	if o := r.Header.Get("Origin"); o != "" && o != "https://"+r.Host {
		return errors.New("cross-origin request")
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return errors.New("cross-site request")
	}
	if r.Method == http.MethodPost && !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		return errors.New("content type must be application/json")
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// decode reads a JSON body into v, refusing unknown fields and trailing data.
func decode(r *http.Request, v any) error {
	d := json.NewDecoder(r.Body)
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return errors.New("request body: trailing data")
	}
	return nil
}

func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Token string `json:"token"`
	}
	if err := decode(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	tok := strings.TrimSpace(req.Token)
	op, err := h.cfg.Authenticate(r.Context(), tok, r.RemoteAddr)
	switch {
	case errors.Is(err, operators.ErrThrottled):
		h.cfg.Log.Warn("console: login refused, throttled", "remote", r.RemoteAddr)
		w.Header().Set("Retry-After", strconv.Itoa(int(time.Minute/time.Second)))
		writeError(w, http.StatusTooManyRequests, err.Error())
		return
	case err != nil || tok == "":
		h.cfg.Log.Warn("console: login refused", "remote", r.RemoteAddr)
		writeError(w, http.StatusUnauthorized, "invalid operator token")
		return
	}
	s := h.sessions.create(op, tok)
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: s.id, Path: "/", Secure: true, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, MaxAge: int(h.cfg.SessionTTL / time.Second)})
	h.cfg.Log.Info("console: login", "operator", op.ID, "role", op.Role.String(), "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, sessionView(op))
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(CookieName); err == nil {
		h.sessions.drop(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", Secure: true, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	w.WriteHeader(http.StatusNoContent)
}

// authed runs fn with the request's live session, or answers 401.
func (h *Handler) authed(fn func(http.ResponseWriter, *http.Request, session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(CookieName)
		if err != nil {
			writeError(w, http.StatusUnauthorized, "not logged in")
			return
		}
		s, ok := h.sessions.get(c.Value)
		if !ok {
			writeError(w, http.StatusUnauthorized, "session expired: log in again")
			return
		}
		fn(w, r, s)
	}
}

// call runs an Admin API call as the session's operator, and turns its
// error into an HTTP answer (true when it failed and was answered). An
// operator the API no longer knows loses the session.
func (h *Handler) call(w http.ResponseWriter, r *http.Request, s session, fn func(ctx context.Context, opt grpc.CallOption) error) bool {
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	err := fn(ctx, grpc.PerRPCCredentials(admin.TokenCredentials(s.token)))
	if err == nil {
		return false
	}
	st := status.Convert(err)
	code := httpCode(st.Code())
	if code == http.StatusUnauthorized {
		h.sessions.drop(s.id)
	}
	writeError(w, code, st.Code().String()+": "+st.Message())
	return true
}

func httpCode(c codes.Code) int {
	switch c {
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.InvalidArgument, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.NotFound:
		return http.StatusNotFound
	case codes.FailedPrecondition, codes.Aborted, codes.AlreadyExists:
		return http.StatusConflict
	case codes.Unavailable, codes.ResourceExhausted:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// sessionJSON is who is logged in and what the policy lets them do, for
// the page to show only that; the API decides regardless.
type sessionJSON struct {
	Operator string          `json:"operator"`
	Role     string          `json:"role"`
	May      map[string]bool `json:"may"`
}

func sessionView(op operators.Operator) sessionJSON {
	may := map[string]bool{}
	for _, m := range []string{"Drain", "Restore", "SetWeight", "ListAudit"} {
		may[m] = admin.Allowed(op.Role, m)
	}
	return sessionJSON{Operator: op.ID, Role: op.Role.String(), May: may}
}

func (h *Handler) session(w http.ResponseWriter, _ *http.Request, s session) {
	writeJSON(w, http.StatusOK, sessionView(s.op))
}

func (h *Handler) events(w http.ResponseWriter, r *http.Request, _ session) {
	evs := []Event{}
	if h.cfg.Events != nil {
		ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
		defer cancel()
		merged, err := h.cfg.Events(ctx, eventsLimit)
		if err != nil {
			h.cfg.Log.Warn("console: events of the other replicas", "error", err)
		}
		if merged != nil {
			evs = merged
		}
	} else if h.cfg.Recent != nil {
		evs = h.cfg.Recent.List(eventsLimit)
	}
	writeJSON(w, http.StatusOK, map[string]any{"events": evs})
}

type auditJSON struct {
	Time    time.Time `json:"time"`
	Actor   string    `json:"actor"`
	Role    string    `json:"role"`
	Method  string    `json:"method"`
	Outcome string    `json:"outcome"`
	Before  string    `json:"before,omitempty"`
	After   string    `json:"after,omitempty"`
	Error   string    `json:"error,omitempty"`
	Replica string    `json:"replica,omitempty"`
}

func (h *Handler) audit(w http.ResponseWriter, r *http.Request, s session) {
	var resp *adminproto.ListAuditResponse
	if h.call(w, r, s, func(ctx context.Context, opt grpc.CallOption) (err error) {
		resp, err = h.cfg.Admin.ListAudit(ctx, &adminproto.ListAuditRequest{Limit: auditLimit}, opt)
		return err
	}) {
		return
	}
	out := make([]auditJSON, 0, len(resp.GetRecords()))
	recs := resp.GetRecords() // oldest first; the console shows the newest first
	for i := len(recs) - 1; i >= 0; i-- {
		a := recs[i]
		out = append(out, auditJSON{Time: a.GetTime().AsTime(), Actor: a.GetActor(), Role: a.GetRole(), Method: a.GetMethod(),
			Outcome: a.GetOutcome(), Before: a.GetBefore(), After: a.GetAfter(), Error: a.GetError(), Replica: a.GetReplica()})
	}
	writeJSON(w, http.StatusOK, map[string]any{"records": out, "pending": resp.GetPending()})
}

// changeReq is a drain, restore or weight change, or its preview.
type changeReq struct {
	Cell    string `json:"cell"`
	Action  string `json:"action"` // "drain", "restore" or "weight"
	Percent int32  `json:"percent"`
	Weight  int32  `json:"weight"`
	// Over is the ramp's length (Go duration: "10m"); "" is now.
	Over string `json:"over"`
}

func (c changeReq) over() (*durationpb.Duration, error) {
	if c.Over == "" {
		return nil, nil
	}
	d, err := time.ParseDuration(c.Over)
	if err != nil || d < 0 {
		return nil, fmt.Errorf("over: %q is not a duration such as 10m", c.Over)
	}
	return durationpb.New(d), nil
}

func (h *Handler) change(w http.ResponseWriter, r *http.Request, s session) {
	var req changeReq
	if err := decode(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	over, err := req.over()
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	var c *adminproto.CellStatus
	fn := func(ctx context.Context, opt grpc.CallOption) (err error) {
		switch req.Action {
		case "drain":
			c, err = h.cfg.Admin.Drain(ctx, &adminproto.DrainRequest{CellId: req.Cell, Percent: req.Percent, Over: over}, opt)
		case "restore":
			c, err = h.cfg.Admin.Restore(ctx, &adminproto.RestoreRequest{CellId: req.Cell, Over: over}, opt)
		case "weight":
			c, err = h.cfg.Admin.SetWeight(ctx, &adminproto.SetWeightRequest{CellId: req.Cell, Weight: req.Weight, Over: over}, opt)
		default:
			err = status.Errorf(codes.InvalidArgument, "action: %q is not drain, restore or weight", req.Action)
		}
		return err
	}
	if h.call(w, r, s, fn) {
		return
	}
	h.cfg.Log.Info("console: change", "operator", s.op.ID, "action", req.Action, "cell", req.Cell)
	writeJSON(w, http.StatusOK, map[string]any{"cell": c.GetId(), "weight": c.GetWeight(), "target_weight": c.GetTargetWeight()})
}
