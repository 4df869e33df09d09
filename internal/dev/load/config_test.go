package load

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cellpay/cellpay/pkg/client"
)

func validConfig() Config {
	return Config{
		Target: TargetGTR, Addr: "127.0.0.1:7070", Mode: ModeClosed,
		Concurrency: 4, Count: 100, Duration: 10 * time.Second,
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr string // substring; "" means valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"cell", func(c *Config) { c.Target, c.Addr = TargetCell, "127.0.0.1:7081" }, ""},
		{"open", func(c *Config) { c.Mode, c.Rate = ModeOpen, 100 }, ""},
		{"count at cap", func(c *Config) { c.Count = MaxCount }, ""},
		{"duration at cap", func(c *Config) { c.Duration = time.Hour }, ""},
		{"loopback 127/8", func(c *Config) { c.Addr = "127.1.2.3:1" }, ""},
		{"loopback v6", func(c *Config) { c.Addr = "[::1]:7070" }, ""},
		{"localhost", func(c *Config) { c.Addr = "localhost:7070" }, ""},

		{"count zero", func(c *Config) { c.Count = 0 }, "count"},
		{"count over cap", func(c *Config) { c.Count = MaxCount + 1 }, "count"},
		{"duration zero", func(c *Config) { c.Duration = 0 }, "duration"},
		{"duration over cap", func(c *Config) { c.Duration = time.Hour + time.Second }, "duration"},
		{"private address", func(c *Config) { c.Addr = "10.0.0.1:7070" }, "loopback"},
		{"public name", func(c *Config) { c.Addr = "example.com:7070" }, "loopback"},
		{"localhost lookalike", func(c *Config) { c.Addr = "localhost.example.com:7070" }, "loopback"},
		{"unspecified v4", func(c *Config) { c.Addr = "0.0.0.0:7070" }, "loopback"},
		{"unspecified v6", func(c *Config) { c.Addr = "[::]:7070" }, "loopback"},
		{"empty host", func(c *Config) { c.Addr = ":7070" }, "loopback"},
		{"no port", func(c *Config) { c.Addr = "127.0.0.1" }, "addr"},
		{"empty port", func(c *Config) { c.Addr = "127.0.0.1:" }, "port"},
		{"target", func(c *Config) { c.Target = "issuer" }, "target"},
		{"mode", func(c *Config) { c.Mode = "burst" }, "mode"},
		{"open without rate", func(c *Config) { c.Mode = ModeOpen }, "rate"},
		{"concurrency", func(c *Config) { c.Concurrency = 0 }, "concurrency"},
		{"decline share", func(c *Config) { c.DeclineShare = 1.5 }, "decline"},
		{"run ID charset", func(c *Config) { c.RunID = "a b" }, "run ID"},
		{"run ID too long", func(c *Config) { c.RunID = strings.Repeat("x", 61) }, "run ID"},
		{"market", func(c *Config) { c.Markets = []string{"GB", "ZZ"} }, "market"},
		{"mix", func(c *Config) { c.PaymentMix = []PaymentWeight{{Type: 0, Weight: 1}} }, "payment mix"},
		{"timeout", func(c *Config) { c.PerRequestTimeout = 2 * time.Hour }, "timeout"},
		{"follow-ups", func(c *Config) { c.FollowUps = 1 }, ""},
		{"follow-ups' longest run ID", func(c *Config) { c.FollowUps, c.RunID = 0.3, strings.Repeat("x", 57) }, ""},
		{"follow-ups negative", func(c *Config) { c.FollowUps = -0.1 }, "follow-ups"},
		{"follow-ups over one", func(c *Config) { c.FollowUps = 1.5 }, "follow-ups"},
		{"follow-ups NaN", func(c *Config) { c.FollowUps = math.NaN() }, "follow-ups"},
		{"follow-ups to a cell", func(c *Config) { c.Target, c.Addr, c.FollowUps = TargetCell, "127.0.0.1:7081", 0.5 }, "follow-ups"},
		{"follow-ups' run ID too long", func(c *Config) { c.FollowUps, c.RunID = 0.3, strings.Repeat("x", 58) }, "run ID"},

		{"access points", func(c *Config) { c.Addr, c.AccessPoints, c.Client.HomeSite = "", sitedAccessPoints(3), "site-a" }, ""},
		{"access points at the cap", func(c *Config) {
			c.Addr, c.AccessPoints, c.Client.HomeSite = "", sitedAccessPoints(client.MaxAccessPoints), "site-a"
		}, ""},
		{"too many access points", func(c *Config) {
			c.Addr, c.AccessPoints, c.Client.HomeSite = "", sitedAccessPoints(client.MaxAccessPoints+1), "site-a"
		}, fmt.Sprintf("access points: %d, want at most %d", client.MaxAccessPoints+1, client.MaxAccessPoints)},
		{"access point off loopback", func(c *Config) {
			c.AccessPoints, c.Client.HomeSite = sitedAccessPoints(3), "site-a"
			c.AccessPoints[2].Addr = "10.0.0.1:7070"
		}, `access points[2]: addr "10.0.0.1:7070": load may only target a loopback address`},
		{"access point without a port", func(c *Config) {
			c.AccessPoints, c.Client.HomeSite = sitedAccessPoints(2), "site-a"
			c.AccessPoints[1].Addr = "127.0.0.1"
		}, "access points[1]: addr"},
		{"endpoints and access points", func(c *Config) {
			c.Endpoints, c.AccessPoints, c.Client.HomeSite = []string{"127.0.0.1:7070"}, sitedAccessPoints(2), "site-a"
		}, "endpoints and access points: give one list"},
		{"access points to a cell", func(c *Config) {
			c.Target, c.AccessPoints, c.Client.HomeSite = TargetCell, sitedAccessPoints(2), "site-a"
		}, "access points: failover is between GTR access points only"},
		{"home site without access points", func(c *Config) { c.Client.HomeSite = "site-a" }, `client home site "site-a": with access points only`},
		{"home site with endpoints", func(c *Config) {
			c.Endpoints, c.Client.HomeSite = []string{"127.0.0.1:7070", "127.0.0.1:7170"}, "site-a"
		}, "client home site"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.edit(&c)
			c.setDefaults()
			err := c.validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("validate: %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("validate: %v, want ErrInvalidConfig mentioning %q", err, tt.wantErr)
			}
		})
	}
}

// sitedAccessPoints returns n loopback access points, the first two in
// site-a, the rest in site-b.
func sitedAccessPoints(n int) []client.AccessPoint {
	aps := make([]client.AccessPoint, n)
	for i := range aps {
		aps[i] = client.AccessPoint{Addr: fmt.Sprintf("127.0.0.1:%d", 7070+100*i), Site: "site-a"}
		if i >= 2 {
			aps[i].Site = "site-b"
		}
	}
	return aps
}

// TestAccessPointsDefaults: with AccessPoints, Addr defaults to the
// access point the client starts on, the first listed of the home site,
// and the client's read timeout to half of PerRequestTimeout.
func TestAccessPointsDefaults(t *testing.T) {
	c := validConfig()
	c.Addr, c.AccessPoints, c.Client.HomeSite = "", sitedAccessPoints(4), "site-b"
	c.setDefaults()
	if err := c.validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	if c.Addr != c.AccessPoints[2].Addr || c.Client.CallTimeout != c.PerRequestTimeout/2 {
		t.Fatalf("Addr %q, call timeout %v: want %q, %v", c.Addr, c.Client.CallTimeout, c.AccessPoints[2].Addr, c.PerRequestTimeout/2)
	}
	if got := c.accessPointAddrs(); len(got) != 4 || got[0] != c.AccessPoints[0].Addr || got[3] != c.AccessPoints[3].Addr {
		t.Fatalf("addresses %v", got)
	}
}

func TestDefaultRunIDFitsIDs(t *testing.T) {
	c := validConfig()
	c.Count = MaxCount
	c.setDefaults()
	if err := c.validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	if id := newGenerator(c).transactionID(MaxCount); len(id) > 64 || !idPattern.MatchString(id) {
		t.Errorf("transaction ID %q does not fit the contract", id)
	}
}
