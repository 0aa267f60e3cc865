package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"regexp"
	"strings"
)

// stage is what winimage applies of one stage of a Dockerfile: the
// instructions a stage that copies a binary onto a base image has.
type stage struct {
	labels     map[string]string
	copies     []copyFrom
	entrypoint []string
	user       string
}

// copyFrom is a COPY --from=<stage> of one file.
type copyFrom struct {
	from, src, dest string
}

var (
	fromAs  = regexp.MustCompile(`(?i)^FROM\s+(?:--platform=\S+\s+)?\S+\s+AS\s+(\S+)$`)
	varRef  = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)`)
	copyArg = regexp.MustCompile(`^--from=(\S+)\s+(\S+)\s+(\S+)$`)
)

// readStage reads the stage named target of a Dockerfile. The stage's ARGs
// take their values from buildArgs, or their defaults; LABEL values expand
// them as a builder does. An instruction winimage cannot apply without
// running the base image (RUN, ENV, WORKDIR, ADD …) is an error, so that a
// change to the stage is not silently left out of the image.
func readStage(r io.Reader, target string, buildArgs map[string]string) (*stage, error) {
	var st *stage
	args := map[string]string{}
	lines, err := instructions(r)
	if err != nil {
		return nil, err
	}
	for _, l := range lines {
		word, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		if strings.EqualFold(word, "FROM") {
			if st != nil {
				break
			}
			if m := fromAs.FindStringSubmatch(l); m != nil && m[1] == target {
				st = &stage{labels: map[string]string{}}
			}
			continue
		}
		if st == nil {
			continue
		}
		switch strings.ToUpper(word) {
		case "ARG":
			pairs, err := keyValues(rest, true)
			if err != nil {
				return nil, fmt.Errorf("ARG %s: %w", rest, err)
			}
			for _, kv := range pairs {
				args[kv[0]] = kv[1]
				if v, ok := buildArgs[kv[0]]; ok {
					args[kv[0]] = v
				}
			}
		case "LABEL":
			pairs, err := keyValues(rest, false)
			if err != nil {
				return nil, fmt.Errorf("LABEL %s: %w", rest, err)
			}
			for _, kv := range pairs {
				v, err := expand(kv[1], args)
				if err != nil {
					return nil, fmt.Errorf("LABEL %s: %w", kv[0], err)
				}
				st.labels[kv[0]] = v
			}
		case "COPY":
			m := copyArg.FindStringSubmatch(rest)
			if m == nil {
				return nil, fmt.Errorf("COPY %s: only COPY --from=<stage> <file> <destination> is applied", rest)
			}
			st.copies = append(st.copies, copyFrom{from: m[1], src: m[2], dest: m[3]})
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &st.entrypoint); err != nil || len(st.entrypoint) == 0 {
				return nil, fmt.Errorf("ENTRYPOINT %s: only the exec form (a JSON array) is applied", rest)
			}
		case "USER":
			st.user = rest
		default:
			return nil, fmt.Errorf("stage %s: winimage does not apply %s (it needs the base image)", target, strings.ToUpper(word))
		}
	}
	if st == nil {
		return nil, fmt.Errorf("no stage %q", target)
	}
	return st, nil
}

// instructions returns a Dockerfile's instructions, one a line, with
// continuation lines joined and comments and blank lines left out.
func instructions(r io.Reader) ([]string, error) {
	var out []string
	var cur strings.Builder
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if body, more := strings.CutSuffix(l, `\`); more {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(l)
		out = append(out, cur.String())
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, strings.TrimSpace(cur.String()))
	}
	return out, sc.Err()
}

// keyValues splits `k1=v1 k2="v 2"` into pairs; a value may be
// double-quoted, with \" and \\ inside. With bare, a key may stand alone
// (an ARG without a default).
func keyValues(s string, bare bool) ([][2]string, error) {
	var out [][2]string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		end := strings.IndexAny(s, "= \t")
		if end < 0 {
			end = len(s)
		}
		key := s[:end]
		if key == "" {
			return nil, fmt.Errorf("an empty key")
		}
		s = s[end:]
		if !strings.HasPrefix(s, "=") {
			if !bare {
				return nil, fmt.Errorf("%s has no value", key)
			}
			out = append(out, [2]string{key, ""})
			continue
		}
		s = s[1:]
		var val strings.Builder
		if strings.HasPrefix(s, `"`) {
			i, closed := 1, false
			for ; i < len(s); i++ {
				c := s[i]
				if c == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
					val.WriteByte(s[i+1])
					i++
					continue
				}
				if c == '"' {
					closed = true
					break
				}
				val.WriteByte(c)
			}
			if !closed {
				return nil, fmt.Errorf("%s: unterminated quote", key)
			}
			s = s[i+1:]
		} else {
			end := strings.IndexAny(s, " \t")
			if end < 0 {
				end = len(s)
			}
			val.WriteString(s[:end])
			s = s[end:]
		}
		out = append(out, [2]string{key, val.String()})
	}
	return out, nil
}

// expand replaces $NAME and ${NAME} in s with the stage's ARG values; a
// name the stage does not declare is an error (a builder would expand it
// to nothing).
func expand(s string, args map[string]string) (string, error) {
	var missing string
	out := varRef.ReplaceAllStringFunc(s, func(ref string) string {
		m := varRef.FindStringSubmatch(ref)
		name := m[1] + m[2]
		v, ok := args[name]
		if !ok && missing == "" {
			missing = name
		}
		return v
	})
	if missing != "" {
		return "", fmt.Errorf("$%s is not an ARG of the stage", missing)
	}
	return out, nil
}

// destination is where a COPY of src to dest puts the file in the
// container, relative to C:\ with forward slashes: a destination ending in
// a slash is a directory that receives the file under its own name.
func destination(src, dest string) (string, error) {
	if strings.HasSuffix(dest, "/") {
		dest += path.Base(src)
	}
	if !strings.HasPrefix(dest, "/") {
		return "", fmt.Errorf("COPY destination %s: not absolute (the stage has no WORKDIR)", dest)
	}
	return strings.TrimPrefix(path.Clean(dest), "/"), nil
}
