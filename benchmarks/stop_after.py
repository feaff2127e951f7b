"""Write a copy of the kernel driver whose items stop after a pass, for the pass-by-pass breakdown.

``benchmarks/avx2_passes.sh`` builds each kernel variant three times from a
copy of the package: the kernel itself, and two scratch builds whose items
stop after the D pass (``-DTB_STOP_AFTER=1``) or after D and H (``=2``).
The production driver (``trilinear_bwd/_kernels/_driver.pxi``) knows nothing
of this: this script writes the stops into the copy's driver, next to the
H pass's call (``reduce_rows(acc_h, ...``) of each of ``_item``'s three
schedules, and fails if the driver no longer has the shape it expects.

    python benchmarks/stop_after.py COPY/trilinear_bwd/_kernels/_driver.pxi
"""

import re
import sys

DEFINE = '''
cdef extern from *:
    """
    /* Written by benchmarks/stop_after.py: 0 the kernel, 1 items stop after
     * the D pass, 2 after D and H. */
    #ifndef TB_STOP_AFTER
    #define TB_STOP_AFTER 0
    #endif
    """
    int TB_STOP_AFTER

'''

# The H pass of each schedule: whole small planes, the channels-last ring,
# channels-first.  Whole planes and the ring are inside a loop over the
# item's planes (the stop skips to the next one); channels-first is not.
H_CALL = re.compile(r"^( +)reduce_rows\(acc_h, .*\)$", re.M)
# Whole planes only: the forward's H and W at once, which a stop leaves out.
FUSED = "            if p.out_direct and hw_pass_channels("
WHOLE_OFF = "            off = dst_base + g * p.target.s_d\n"


def patch(text):
    calls = list(H_CALL.finditer(text))
    if len(calls) != 3 or text.count(FUSED) != 1 or text.count(WHOLE_OFF) != 1:
        raise SystemExit("stop_after.py: the driver's passes are not where expected "
                         f"({len(calls)} H calls, {text.count(FUSED)} fused H+W)")
    out = []
    last = 0
    for m in calls:
        indent = m.group(1)
        leave = "return" if len(indent) == 8 else "continue"
        out.append(text[last:m.start()])
        if len(indent) != 12:   # whole planes stop after D before the fused H and W
            out.append(f"{indent}if TB_STOP_AFTER == 1:\n{indent}    {leave}\n")
        out.append(m.group(0))
        out.append(f"\n{indent}if TB_STOP_AFTER == 2:\n{indent}    {leave}")
        last = m.end()
    out.append(text[last:])
    text = "".join(out)
    # Whole planes: the stop after D comes before the fused H and W too.
    text = text.replace(WHOLE_OFF, "            if TB_STOP_AFTER == 1:\n"
                                   "                continue\n" + WHOLE_OFF)
    text = text.replace(FUSED, "            if TB_STOP_AFTER == 0 and p.out_direct and "
                               "hw_pass_channels(")
    at = text.index("\ncdef ")
    return text[:at + 1] + DEFINE + text[at + 1:]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        raise SystemExit(__doc__)
    with open(argv[0]) as f:
        text = f.read()
    with open(argv[0], "w") as f:
        f.write(patch(text))


if __name__ == "__main__":
    main()
