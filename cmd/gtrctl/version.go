package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/cellpay/cellpay/internal/buildinfo"
)

// versionCommand is gtrctl version (and gtrctl -version): this gtrctl's
// build, without a GTR.
func versionCommand() command {
	return command{name: "version", offline: true,
		help: "print gtrctl's version and build (module version, VCS revision and time, Go version); needs no GTR",
		run: func(_ context.Context, c *cli, args []string) error {
			if len(args) != 0 {
				return errUsage
			}
			info := buildinfo.Read("gtrctl")
			if c.json() {
				b, err := json.MarshalIndent(info, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(c.out, string(b))
				return err
			}
			_, err := fmt.Fprintln(c.out, info)
			return err
		}}
}
