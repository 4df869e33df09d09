package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// completionCommand is gtrctl completion bash|zsh: a shell completion
// script for gtrctl's commands, their subcommands and their flags, made
// from the command table itself, so that it never lags a new command.
func completionCommand() command {
	return command{name: "completion", args: "bash|zsh", offline: true,
		help: "print a shell completion script (bash: source <(gtrctl completion bash); zsh: the same, with bashcompinit); needs no GTR",
		run: func(_ context.Context, c *cli, args []string) error {
			if len(args) != 1 || (args[0] != "bash" && args[0] != "zsh") {
				return errUsage
			}
			if args[0] == "zsh" {
				fmt.Fprintln(c.out, "autoload -U +X bashcompinit && bashcompinit")
			}
			return writeCompletion(c.out)
		}}
}

// writeCompletion writes the bash completion function: the first word
// from the commands' first words, the second from a group's subcommands,
// and from a "-" on, the command's flags.
func writeCompletion(w io.Writer) error {
	var firsts []string
	subs := map[string][]string{}
	flags := map[string][]string{}
	for _, cmd := range commands() {
		first, sub, _ := strings.Cut(cmd.name, " ")
		if !slices.Contains(firsts, first) {
			firsts = append(firsts, first)
		}
		if sub != "" {
			subs[first] = append(subs[first], sub)
		}
		fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
		var g globals
		g.register(fs)
		if cmd.flags != nil {
			cmd.flags(fs)
		}
		fs.VisitAll(func(f *flag.Flag) {
			dashes := "--"
			if len(f.Name) == 1 {
				dashes = "-"
			}
			flags[cmd.name] = append(flags[cmd.name], dashes+f.Name)
		})
	}
	firsts = append(firsts, "help")
	var b strings.Builder
	b.WriteString("# gtrctl completion (gtrctl completion bash); made from gtrctl's own command table.\n")
	b.WriteString("_gtrctl() {\n\tlocal cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]} sub=${COMP_WORDS[2]}\n")
	fmt.Fprintf(&b, "\tif [ \"$COMP_CWORD\" -eq 1 ]; then\n\t\tCOMPREPLY=($(compgen -W %q -- \"$cur\"))\n\t\treturn\n\tfi\n", strings.Join(firsts, " "))
	b.WriteString("\tif [ \"$COMP_CWORD\" -eq 2 ]; then\n\t\tcase $cmd in\n")
	for _, first := range firsts {
		if s := subs[first]; len(s) > 0 {
			fmt.Fprintf(&b, "\t\t%s) COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;\n", first, strings.Join(s, " "))
		}
	}
	b.WriteString("\t\tesac\n\tfi\n")
	b.WriteString("\tcase $cur in -*) ;; *) return ;; esac\n\tcase \"$cmd $sub\" in\n")
	for _, cmd := range commands() {
		if _, _, grouped := strings.Cut(cmd.name, " "); grouped {
			fmt.Fprintf(&b, "\t\"%s\") COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", cmd.name, strings.Join(flags[cmd.name], " "))
		}
	}
	for _, cmd := range commands() {
		if !strings.Contains(cmd.name, " ") {
			fmt.Fprintf(&b, "\t\"%s \"*) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", cmd.name, strings.Join(flags[cmd.name], " "))
		}
	}
	b.WriteString("\tesac\n}\ncomplete -F _gtrctl gtrctl\n")
	_, err := io.WriteString(w, b.String())
	return err
}
