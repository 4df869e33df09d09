// Command newcell adds a cell to deploy/k8s: a new overlay and one line in
// the GTR's routing table. scripts/k8s-new-cell.sh runs it.
//
//	go run ./cmd/newcell -root .. cell-d
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/cellpay/cellpay/deploy/k8s/check"
)

func main() {
	root := flag.String("root", "..", "the deploy/k8s directory")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: newcell [-root DIR] NAME")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	name := flag.Arg(0)
	if err := check.NewCell(*root, name); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("added overlays/%s and its line in overlays/platform/gtr.yaml (weight 0)\n", name)
}
