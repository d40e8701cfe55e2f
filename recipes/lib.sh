# recipes/lib.sh: shell pieces shared by the recipe drivers (recipes/demo/run.sh,
# recipes/qat-experiment/run.sh); sourced, not run. The caller sets POCKET (the
# binary), RUN (its run directory), RUN_NAME (the prefix of its messages) and
# traps INT/TERM into interrupted=1.

check_interrupt() {
    if [ "$interrupted" = 1 ]; then
        echo "$RUN_NAME: interrupted; run it again to resume" >&2
        exit 130
    fi
}

# pocket train RECIPE with its whole output appended to LOG. Without a
# terminal pocket train prints a progress line every half second: the screen
# gets one per 50 steps, the first and the last, and every other line
# (evaluations, messages).
train_logged() {
    local recipe=$1 log=$2
    # Ctrl-C reaches the whole pipeline: the readers ignore it, so that pocket
    # can still print while it saves its checkpoint.
    "$POCKET" train "$recipe" 2>&1 | (trap '' INT; tee -a "$log" | awk '
        /^step [0-9]+\/[0-9]+ loss/ {
            split($2, s, "/"); k = int(s[1] / 50)
            if (seen && k == last && s[1] != s[2]) next
            seen = 1; last = k
        }
        { print; fflush() }')
    check_interrupt
}

# Loss and perplexity from a `pocket eval` output kept in $RUN/eval/NAME.txt.
loss_of() { sed -n 's/.*: loss \([0-9.]*\), perplexity \([0-9.]*\).*/\1/p' "$RUN/eval/$1.txt"; }
ppl_of() { sed -n 's/.*: loss \([0-9.]*\), perplexity \([0-9.]*\).*/\2/p' "$RUN/eval/$1.txt"; }
