package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// readOnlyPrograms are the programs an allow rule's command_prefix may
// name, each with why it is here. A prefix allows whatever follows it,
// and a glob in the arguments can even turn a file name into an option,
// so a program belongs here only if none of its options, in busybox (the
// sandbox's applets) or GNU coreutils (the shell tool outside the
// sandbox), runs another program or writes a file. When in doubt a
// program stays out: the owner can still allow an exact command.
//
// Left out, among others: find (-exec, -execdir, -ok, -okdir; -delete
// and -fprint write); xargs, env, timeout, nice, nohup, time, watch,
// strace, sudo, su, exec, command, eval, source and "." (they run their
// arguments); sh, bash, dash, ash and busybox (any applet); awk and gawk
// (system(), pipes); sed (the e command, w); perl, python, ruby, node;
// git (-c, aliases, hooks, pagers); make; ssh; tar (--to-command,
// --checkpoint-action, -I); zip (-TT); rsync (-e); vi, vim, less, more,
// man (shell escapes, pagers); sort (GNU --compress-program; -o writes);
// uniq (writes its second operand); diff (GNU -l runs pr); file (-z may
// run decompressors); gzip and zcat (write; GNU zcat is a script); date
// (-s sets the clock); tee, cp, mv, rm, touch, mkdir, ln, chmod (write);
// kill (signals).
var readOnlyPrograms = map[string]string{
	"basename":  "prints part of its argument; reads nothing",
	"cat":       "prints files",
	"cmp":       "compares two files; no option runs a program",
	"cut":       "prints columns of its input",
	"df":        "prints free space",
	"dirname":   "prints part of its argument; reads nothing",
	"du":        "prints disk usage; --files0-from only reads names",
	"echo":      "prints its arguments (a shell builtin)",
	"grep":      "searches files; unlike find or sed it has no option that runs a program (zgrep, which runs gzip, is another name and not here)",
	"head":      "prints the start of files",
	"id":        "prints the user's ids",
	"ls":        "lists directories; no option runs a program",
	"md5sum":    "prints or checks checksums; -c only reads",
	"pwd":       "prints the working directory (a shell builtin)",
	"readlink":  "prints where a link points",
	"realpath":  "prints a resolved path",
	"sha1sum":   "prints or checks checksums; -c only reads",
	"sha256sum": "prints or checks checksums; -c only reads",
	"stat":      "prints file status",
	"tac":       "prints files last line first",
	"tail":      "prints the end of files; -f only waits (the shell tool's timeout ends it)",
	"tr":        "translates its input to its output",
	"uname":     "prints the system's name",
	"wc":        "counts lines, words and bytes; --files0-from only reads names",
	"whoami":    "prints the user's name",
}

// shellControl are the characters that would let a command do more than
// its program: chain, pipe, substitute, redirect or background.
const shellControl = ";&|`$()<>\n\r"

// programOf is a command's first word as the shell splits it (at a space
// or a tab). Quotes and backslashes are kept, so a quoted or escaped name
// is never taken for a listed program.
func programOf(command string) string {
	command = strings.TrimLeft(command, " \t")
	if i := strings.IndexAny(command, " \t"); i >= 0 {
		return command[:i]
	}
	return command
}

// runsOnlyItself reports whether command runs one program of
// readOnlyPrograms and nothing else: no shell control character anywhere
// in it. It is what an allow rule's command_prefix needs of a call.
func runsOnlyItself(command string) bool {
	_, listed := readOnlyPrograms[programOf(command)]
	return listed && !strings.ContainsAny(command, shellControl)
}

// allowablePrefix says why prefix cannot be an allow rule's
// command_prefix, nil when it can: a listed program's name and a space,
// then anything without a shell control character.
func allowablePrefix(prefix string) error {
	prog := programOf(prefix)
	_, listed := readOnlyPrograms[prog]
	switch {
	case strings.ContainsAny(prefix, shellControl):
		return fmt.Errorf("command_prefix %q holds a shell control character (; & | ` $ ( ) < > or a line break), which would let the command run more than its program", prefix)
	case !listed:
		return fmt.Errorf("a command_prefix may allow only a program that can neither run another program nor write a file (%s), not %q; allow an exact command with the command condition instead",
			strings.Join(prefixPrograms(), ", "), prog)
	case !strings.HasPrefix(prefix, prog+" "):
		return fmt.Errorf("command_prefix %q must be the program's name and a space, such as %q", prefix, prog+" ")
	}
	return nil
}

// allowedPrefixWords says which commands an allow rule's command_prefix
// matches. A prefix that allowablePrefix refuses may still be stored from
// before it did: the words say what it matches now, often nothing.
func allowedPrefixWords(prefix string) string {
	const plain = "holds none of ; & | ` $ ( ) < > or a line break"
	prog := programOf(prefix)
	_, listed := readOnlyPrograms[prog]
	whole := strings.ContainsAny(strings.TrimLeft(prefix, " \t"), " \t") // the prefix names the program in full
	switch {
	case strings.ContainsAny(prefix, shellControl):
		return fmt.Sprintf("the command starts with %q, which matches no command: an allowed command %s", prefix, plain)
	case whole && !listed:
		return fmt.Sprintf("the command starts with %q, which matches no command: %s can run another program or write a file, so only an exact command can allow it", prefix, prog)
	case whole:
		return fmt.Sprintf("the command starts with %q and %s", prefix, plain)
	default:
		return fmt.Sprintf("the command starts with %q, runs a program that can neither run another program nor write a file, and %s", prefix, plain)
	}
}

// prefixPrograms are the names of readOnlyPrograms, sorted.
func prefixPrograms() []string {
	names := slices.Collect(maps.Keys(readOnlyPrograms))
	slices.Sort(names)
	return names
}
