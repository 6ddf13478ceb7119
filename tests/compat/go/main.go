// A strict client of the original service's API in Go, for our tests: the
// fourteen calls of the original's Go SDK (and healthz), every answer
// decoded with DisallowUnknownFields into the original's types, run as one
// flow against a real daemon. Standard library only.
//
//	strictclient -url http://127.0.0.1:PORT -token TOKEN [-skills-may-be-absent=false] [-send-extended]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

type flow struct {
	c                 *Client
	ctx               context.Context
	skillsMayBeAbsent bool
	failed            int
}

func (f *flow) step(name string, fn func() error) {
	if err := fn(); err != nil {
		f.failed++
		fmt.Printf("FAIL %s: %v\n", name, err)
		return
	}
	fmt.Printf("ok   %s\n", name)
}

func want(cond bool, format string, args ...any) error {
	if cond {
		return nil
	}
	return fmt.Errorf(format, args...)
}

func (f *flow) waitFinal(id string) (Task, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		t, err := f.c.GetTask(f.ctx, id)
		if err != nil {
			return t, err
		}
		switch t.Status {
		case "succeeded", "failed", "canceled":
			return t, nil
		}
		if time.Now().After(deadline) {
			return t, fmt.Errorf("task %s still %s", id, t.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// absent: the router's own 404 for a skill route, accepted only while the
// skills routes may be absent.
func (f *flow) absent(err error) (bool, error) {
	var ae *APIError
	if errors.As(err, &ae) && ae.RouteAbsent {
		if f.skillsMayBeAbsent {
			return true, nil
		}
		return true, fmt.Errorf("the route is absent: %v", err)
	}
	return false, err
}

func main() {
	url := flag.String("url", "", "the daemon's base URL")
	token := flag.String("token", "", "a bearer token")
	skillsMayBeAbsent := flag.Bool("skills-may-be-absent", true,
		"accept the router's 404 for the four skill calls (the skills routes not merged yet)")
	extended := flag.Bool("send-extended", false,
		"send X-Sandbox-Extended: 1 (our answers): the strict decoding must then fail")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := &flow{c: NewClient(*url, *token), ctx: ctx, skillsMayBeAbsent: *skillsMayBeAbsent}
	c := f.c
	c.extended = *extended

	f.step("healthz", func() error {
		h, err := c.Healthz(ctx)
		if err != nil {
			return err
		}
		return want(h.OK, "healthz not ok")
	})
	f.step("readyz_created_until_first_start", func() error {
		r, err := c.Readyz(ctx)
		if err != nil {
			return err
		}
		return want(r.OK && r.Status == "created", "readyz %+v", r)
	})
	f.step("get_status", func() error {
		s, err := c.GetStatus(ctx)
		if err != nil {
			return err
		}
		return want(s.Status == "created" && s.RuntimeID != "" && s.Workspace != "" &&
			s.StartedAt.IsZero(), "status %+v", s)
	})
	f.step("start_runtime", func() error {
		r, err := c.StartRuntime(ctx)
		if err != nil {
			return err
		}
		return want(r.OK && r.Status.Status == "ready" && !r.Status.StartedAt.IsZero(),
			"start %+v", r)
	})
	f.step("exec", func() error {
		r, err := c.Exec(ctx, ExecRequest{Command: []string{"/bin/sh", "-c", "echo $X; exit 2"},
			Env: map[string]string{"X": "go-client"}, TimeoutSeconds: 20})
		if err != nil {
			return err
		}
		return want(r.ExitCode == 2 && r.Stdout == "go-client\n" && !r.EndedAt.IsZero(),
			"exec %+v", r)
	})
	var events <-chan Event
	var evErrs <-chan error
	f.step("subscribe_events", func() error {
		var err error
		events, evErrs, err = c.SubscribeEvents(ctx)
		return err
	})
	var first Task
	f.step("submit_task_pending", func() error {
		var err error
		first, err = c.SubmitTask(ctx, ExecRequest{Command: []string{"echo", "from-go"}})
		if err != nil {
			return err
		}
		return want(first.Status == "pending" && first.Result == nil && first.ID != "",
			"new task %+v", first)
	})
	f.step("events_in_order", func() error {
		if events == nil {
			return fmt.Errorf("no stream")
		}
		var types []string
		timeout := time.After(20 * time.Second)
		for len(types) < 3 {
			select {
			case ev, ok := <-events:
				if !ok {
					return fmt.Errorf("stream ended after %v", types)
				}
				if ev.Data["taskId"] != first.ID {
					continue
				}
				switch ev.Type {
				case "exec_started", "task_running", "exec_finished":
					types = append(types, ev.Type)
				}
			case err := <-evErrs:
				return err
			case <-timeout:
				return fmt.Errorf("events so far: %v", types)
			}
		}
		return want(strings.Join(types, ",") == "exec_started,task_running,exec_finished",
			"order %v", types)
	})
	f.step("get_task", func() error {
		t, err := f.waitFinal(first.ID)
		if err != nil {
			return err
		}
		return want(t.Status == "succeeded" && t.Result != nil && t.Result.Stdout == "from-go\n",
			"task %+v", t)
	})
	f.step("cancel_task", func() error {
		t, err := c.SubmitTask(ctx, ExecRequest{Command: []string{"sleep", "60"}})
		if err != nil {
			return err
		}
		for i := 0; i < 200; i++ {
			if g, err := c.GetTask(ctx, t.ID); err != nil || g.Status == "running" {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if _, err := c.CancelTask(ctx, t.ID); err != nil {
			return err
		}
		t, err = f.waitFinal(t.ID)
		if err != nil {
			return err
		}
		return want(t.Status == "canceled" && t.Result != nil && t.Result.ExitCode == 124,
			"canceled %+v", t)
	})
	f.step("list_tasks", func() error {
		ts, err := c.ListTasks(ctx)
		if err != nil {
			return err
		}
		for _, t := range ts {
			if t.ID == first.ID {
				return want(t.Result != nil && t.Result.Stdout == "from-go\n", "listed %+v", t)
			}
		}
		return fmt.Errorf("task %s not listed", first.ID)
	})
	f.step("stop_runtime_refuses_until_start", func() error {
		r, err := c.StopRuntime(ctx)
		if err != nil {
			return err
		}
		if r.Status.Status != "stopped" {
			return fmt.Errorf("stop %+v", r)
		}
		_, err = c.Exec(ctx, ExecRequest{Command: []string{"true"}})
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(ae.Body, "runtime stopped") {
			return fmt.Errorf("exec while stopped: %v", err)
		}
		if _, err := c.StartRuntime(ctx); err != nil {
			return err
		}
		e, err := c.Exec(ctx, ExecRequest{Command: []string{"true"}})
		if err != nil {
			return err
		}
		return want(e.ExitCode == 0, "exec after start %+v", e)
	})
	var skills []SkillInfo
	f.step("list_skills", func() error {
		var err error
		skills, err = c.ListSkills(ctx)
		if gone, err2 := f.absent(err); gone || err2 != nil {
			return err2
		}
		return nil
	})
	f.step("reload_skills", func() error {
		r, err := c.ReloadSkills(ctx)
		if gone, err2 := f.absent(err); gone || err2 != nil {
			return err2
		}
		return want(r.OK, "reload %+v", r)
	})
	f.step("get_skill", func() error {
		name := "ur-api"
		if len(skills) > 0 {
			name = skills[0].Name
		}
		s, err := c.GetSkill(ctx, name)
		if gone, err2 := f.absent(err); gone || err2 != nil {
			return err2
		}
		return want(s.Name == name, "skill %+v", s)
	})
	f.step("activate_skill_unknown_is_400", func() error {
		_, err := c.ActivateSkill(ctx, "no-such-skill", "v1")
		if gone, err2 := f.absent(err); gone {
			return err2
		}
		var ae *APIError
		return want(errors.As(err, &ae) && ae.Status == 400, "activate: %v", err)
	})
	fmt.Printf("strictclient: %d failed\n", f.failed)
	if f.failed > 0 {
		os.Exit(1)
	}
}
