package callback

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/partners"
)

func TestOrder(t *testing.T) {
	eps := []string{"https://a", "https://b", "https://c"}
	tests := []struct {
		name     string
		cb       partners.Callbacks
		disabled []string
		attempt  int
		want     []string
	}{
		{"ordered", partners.Callbacks{Mode: partners.ModeOrdered, Endpoints: eps}, nil, 0, eps},
		{"default is ordered", partners.Callbacks{Endpoints: eps}, nil, 3, eps},
		{"reverse", partners.Callbacks{Mode: partners.ModeReverse, Endpoints: eps}, nil, 0, []string{"https://c", "https://b", "https://a"}},
		{"public last", partners.Callbacks{Mode: partners.ModeOrdered, Endpoints: eps[:2], Public: "https://pub"}, nil, 0, []string{"https://a", "https://b", "https://pub"}},
		{"disabled skipped", partners.Callbacks{Mode: partners.ModeOrdered, Endpoints: eps, Public: "https://pub"}, []string{"https://a", "https://pub"}, 0, []string{"https://b", "https://c"}},
		{"only public", partners.Callbacks{Public: "https://pub"}, nil, 0, []string{"https://pub"}},
		{"nothing", partners.Callbacks{}, nil, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Order(tt.cb, tt.disabled, "evt_x", tt.attempt); !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestRandomMoves: random mode tries every endpoint in each attempt, a
// retry starts at another endpoint, and events spread over all of them.
func TestRandomMoves(t *testing.T) {
	cb := partners.Callbacks{Mode: partners.ModeRandom, Endpoints: []string{"https://a", "https://b", "https://c"}, Public: "https://pub"}
	firsts := map[string]int{}
	for i := range 300 {
		id := "evt_" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		o0, o1 := Order(cb, nil, id, 0), Order(cb, nil, id, 1)
		if len(o0) != 4 || o0[3] != "https://pub" || o0[0] == o1[0] {
			t.Fatalf("%s: attempt 0 %v, attempt 1 %v", id, o0, o1)
		}
		firsts[o0[0]]++
	}
	for _, e := range cb.Endpoints {
		if firsts[e] < 50 {
			t.Fatalf("first endpoints %v: not spread", firsts)
		}
	}
}

func TestDecide(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := Schedule{0, time.Second, 10 * time.Second}
	tests := []struct {
		name     string
		attempts int
		results  []Result
		want     Decision
	}{
		{"first endpoint takes it", 0, []Result{{Endpoint: "a", HTTPStatus: 204}},
			Decision{Delivered: true, Attempts: 1, DeliveredTo: "a", Last: Result{Endpoint: "a", HTTPStatus: 204}}},
		{"second after a 500", 0, []Result{{Endpoint: "a", HTTPStatus: 500}, {Endpoint: "b", HTTPStatus: 200}},
			Decision{Delivered: true, Attempts: 1, DeliveredTo: "b", Last: Result{Endpoint: "b", HTTPStatus: 200}}},
		{"all fail: retry on schedule", 0, []Result{{Endpoint: "a", Err: "timeout"}},
			Decision{Attempts: 1, NextAttempt: now.Add(time.Second), Last: Result{Endpoint: "a", Err: "timeout"}}},
		{"Retry-After longer than the step", 1, []Result{{Endpoint: "a", HTTPStatus: 429, RetryAfter: 30 * time.Second}},
			Decision{Attempts: 2, NextAttempt: now.Add(30 * time.Second), Last: Result{Endpoint: "a", HTTPStatus: 429, RetryAfter: 30 * time.Second}}},
		{"Retry-After capped", 0, []Result{{Endpoint: "a", HTTPStatus: 503, RetryAfter: 48 * time.Hour}},
			Decision{Attempts: 1, NextAttempt: now.Add(time.Minute), Last: Result{Endpoint: "a", HTTPStatus: 503, RetryAfter: 48 * time.Hour}}},
		{"410 disables and moves on", 0, []Result{{Endpoint: "a", HTTPStatus: 410}, {Endpoint: "b", HTTPStatus: 500}},
			Decision{Attempts: 1, NextAttempt: now.Add(time.Second), Disable: []string{"a"}, Last: Result{Endpoint: "b", HTTPStatus: 500}}},
		{"last attempt fails: dead", 2, []Result{{Endpoint: "a", HTTPStatus: 500}},
			Decision{Dead: true, Attempts: 3, Last: Result{Endpoint: "a", HTTPStatus: 500}}},
		{"nothing to try", 0, nil,
			Decision{Attempts: 1, NextAttempt: now.Add(time.Second), Last: Result{Err: ErrNoEndpoint.Error()}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(s, tt.attempts, tt.results, now, time.Minute)
			if got.Delivered != tt.want.Delivered || got.Dead != tt.want.Dead || got.Attempts != tt.want.Attempts ||
				!got.NextAttempt.Equal(tt.want.NextAttempt) || got.DeliveredTo != tt.want.DeliveredTo ||
				!slices.Equal(got.Disable, tt.want.Disable) || got.Last != tt.want.Last {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestScheduleAndRetryAfter(t *testing.T) {
	s, err := ParseSchedule("0s, 5s,5m,30m,2h,5h,10h,10h")
	if err != nil || !slices.Equal(s, SvixSchedule) || s.String() != "0s,5s,5m0s,30m0s,2h0m0s,5h0m0s,10h0m0s,10h0m0s" {
		t.Fatalf("%v %v", s, err)
	}
	for _, bad := range []string{"", "5", "-1s", "1s,,2s"} {
		if _, err := ParseSchedule(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for h, want := range map[string]time.Duration{"": 0, "7": 7 * time.Second, "x": 0, "-3": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second} {
		if got := RetryAfter(h, now); got != want {
			t.Errorf("RetryAfter(%q) = %v, want %v", h, got, want)
		}
	}
	for st, want := range map[int]Verdict{200: Delivered, 204: Delivered, 410: Gone, 429: Throttled, 503: Throttled, 500: Failed, 404: Failed, 301: Failed, 0: Failed} {
		if got := Classify(st); got != want {
			t.Errorf("Classify(%d) = %v, want %v", st, got, want)
		}
	}
}
